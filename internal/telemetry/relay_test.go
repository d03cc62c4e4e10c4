package telemetry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

func relayed(ns []Notification) []Relayed {
	out := make([]Relayed, len(ns))
	for i, n := range ns {
		out[i] = Relayed{Origin: n.ID, Notification: Notification{Device: n.Device, Name: n.Name, Parameters: n.Parameters, DeviceTime: n.DeviceTime}}
	}
	return out
}

// A gateway's notifications reach the centre's store once each, in order, whatever is
// sent again: the centre's mark moves with the rows it stores, and survives a restart.
func TestRelayStoresEachNotificationOnce(t *testing.T) {
	ctx := context.Background()
	gwDir, centreDir := t.TempDir(), t.TempDir()
	gw, centre := open(t, gwDir, Config{}), open(t, centreDir, Config{})
	when := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	for i := range 5 {
		n := note("cam-1", "temp")
		if i == 1 {
			n.DeviceTime = &when
		}
		if _, err := gw.Append(ctx, n, note("cam-2", "temp")); err != nil {
			t.Fatal(err)
		}
	}
	id, err := gw.Identity(ctx)
	if again, err2 := gw.Identity(ctx); err != nil || err2 != nil || id == "" || again != id {
		t.Fatalf("identity %q then %q: %v %v", id, again, err, err2)
	}
	source := "gw1/" + id
	if m, err := centre.RelayMark(ctx, source); err != nil || m != 0 {
		t.Fatalf("mark of a new source: %d %v", m, err)
	}

	first, err := gw.After(ctx, 0, 4)
	if err != nil || len(first) != 4 {
		t.Fatalf("after 0: %d %v", len(first), err)
	}
	upto := first[3].ID
	stored, dups, mark, err := centre.AppendRelayed(ctx, source, upto, relayed(first))
	if err != nil || len(stored) != 4 || dups != 0 || mark != upto {
		t.Fatalf("first batch: %d stored, %d dups, mark %d, %v", len(stored), dups, mark, err)
	}
	if stored[2].DeviceTime == nil || !stored[2].DeviceTime.Equal(when) || stored[0].Device != "cam-1" || stored[1].Device != "cam-2" {
		t.Fatalf("stored %+v", stored[:3])
	}
	// The answer was lost: the gateway sends the batch again, and with it the next.
	second, _ := gw.After(ctx, 0, 100)
	stored, dups, mark, err = centre.AppendRelayed(ctx, source, second[len(second)-1].ID, relayed(second))
	if err != nil || len(stored) != 6 || dups != 4 || mark != second[len(second)-1].ID {
		t.Fatalf("again with more: %d stored, %d dups, mark %d, %v", len(stored), dups, mark, err)
	}
	for _, dev := range []string{"cam-1", "cam-2"} {
		if n := stored_(t, centre, dev); n != 5 {
			t.Fatalf("the centre holds %d notifications of %s, want 5", n, dev)
		}
	}

	// The same ids from another source (another gateway, or this one's new store) are
	// not duplicates.
	stored, dups, _, err = centre.AppendRelayed(ctx, "gw2/x", upto, relayed(first))
	if err != nil || len(stored) != 4 || dups != 0 {
		t.Fatalf("another source: %d stored, %d dups, %v", len(stored), dups, err)
	}
	// Nothing left to store but read further (a removed device's rows): the mark moves.
	if _, _, mark, err = centre.AppendRelayed(ctx, source, mark+10, nil); err != nil || mark != second[len(second)-1].ID+10 {
		t.Fatalf("an empty batch: mark %d, %v", mark, err)
	}
	// Out of order, or an item above the batch's mark: refused, nothing stored.
	bad := relayed(first[:2])
	bad[0].Origin, bad[1].Origin = mark+5, mark+2
	if _, _, _, err := centre.AppendRelayed(ctx, source, mark+5, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("origins out of order: %v", err)
	}
	bad = relayed(first[:1])
	bad[0].Origin = mark + 5
	if _, _, _, err := centre.AppendRelayed(ctx, source, mark+1, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an origin above the batch's mark: %v", err)
	}
	bad[0].Name = ""
	if _, _, _, err := centre.AppendRelayed(ctx, source, mark+5, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an invalid notification: %v", err)
	}

	centre.Close()
	gw.Close()
	centre, gw = open(t, centreDir, Config{}), open(t, gwDir, Config{})
	if m, err := centre.RelayMark(ctx, source); err != nil || m != mark {
		t.Fatalf("mark after a restart: %d %v, want %d", m, err, mark)
	}
	if again, err := gw.Identity(ctx); err != nil || again != id {
		t.Fatalf("identity after a restart: %q %v, want %q", again, err, id)
	}
	if n := stored_(t, centre, "cam-1"); n != 7 {
		t.Fatalf("after a restart the centre holds %d of cam-1, want 7", n)
	}
}

func stored_(t *testing.T, s *Store, device string) int {
	t.Helper()
	got, err := s.List(context.Background(), Filter{Devices: []string{device}, Take: MaxTake})
	if err != nil {
		t.Fatal(err)
	}
	return len(got)
}

// The same batch arriving twice at once (two sessions of one gateway, one ending) is
// stored once, even when both land in one transaction.
func TestRelayedBatchesAtOnceAreStoredOnce(t *testing.T) {
	ctx := context.Background()
	gw, centre := open(t, t.TempDir(), Config{}), open(t, t.TempDir(), Config{CommitInterval: 50 * time.Millisecond})
	for range 3 {
		if _, err := gw.Append(ctx, note("cam-1", "t")); err != nil {
			t.Fatal(err)
		}
	}
	batch, _ := gw.After(ctx, 0, 10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total, dups := 0, 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, d, _, err := centre.AppendRelayed(ctx, "gw1/a", batch[2].ID, relayed(batch))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total, dups = total+len(got), dups+d
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 3 || dups != 9 || stored_(t, centre, "cam-1") != 3 {
		t.Fatalf("stored %d (%d dups), the centre holds %d; want 3 once", total, dups, stored_(t, centre, "cam-1"))
	}
}

// A relay reads its own store in id order and leaves out removed devices.
func TestAfterSkipsRemovedDevices(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir(), Config{})
	if _, err := s.Append(ctx, note("a", "1"), note("b", "1"), note("a", "2")); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDevice(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	got, err := s.After(ctx, 0, 10)
	if err != nil || len(got) != 2 || got[0].Device != "a" || got[1].Name != "2" || got[0].ID >= got[1].ID {
		t.Fatalf("after: %+v %v", got, err)
	}
	if got, _ := s.After(ctx, got[1].ID, 10); len(got) != 0 {
		t.Fatalf("after the last: %+v", got)
	}
	// The last id counts the removed device's too: it bounds what a relay has left.
	if last, err := s.LastID(ctx); err != nil || last != got[1].ID {
		t.Fatalf("last id %d %v, want %d", last, err, got[1].ID)
	}
}

// Copying a store keeps what relays rely on: the marks of the sources it took from,
// and, with the ids, its identity.
func TestCopyCarriesRelayState(t *testing.T) {
	pgOnly(t)
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Identity(ctx)
	if err == nil {
		_, _, _, err = s.AppendRelayed(ctx, "gw1/x", 7, []Relayed{{Origin: 7, Notification: note("cam-1", "t")}})
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	shared := location(t, t.TempDir())
	if res, err := Copy(ctx, dir, shared, nil); err != nil || !res.KeptIDs {
		t.Fatalf("copy: %+v %v", res, err)
	}
	c, err := Open(ctx, shared, Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Identity(ctx); err != nil || got != id {
		t.Fatalf("identity after the copy: %q %v, want %q", got, err, id)
	}
	if m, err := c.RelayMark(ctx, "gw1/x"); err != nil || m != 7 {
		t.Fatalf("mark after the copy: %d %v", m, err)
	}
}

// In a gateway's store, retention counts what it deletes before the centre got it; a
// store that is not relayed counts nothing, and the centre's mark survives a restart.
func TestRetentionCountsWhatTheCentreHadNotGot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Config{MaxPerDevice: 3, Retention: time.Hour})
	var ids []int64
	for range 6 {
		got, err := s.Append(ctx, note("cam-1", "n"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got[0].ID)
	}
	if n, err := s.PruneCount(ctx); err != nil || n != 3 || s.UnrelayedDeleted() != 0 {
		t.Fatalf("a store nobody relays: pruned %d, %v, counted %d lost", n, err, s.UnrelayedDeleted())
	}
	// The relay starts: the centre has everything up to the fifth.
	if err := s.SetRelayedUpTo(ctx, ids[4], true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, note("cam-1", "n"), note("cam-1", "n")); err != nil {
		t.Fatal(err)
	}
	// cam-1 holds ids[3], ids[4], ids[5] and two new ones: count keeps the newest 3,
	// deleting ids[3] and ids[4] (the centre has them) and nothing lost.
	if n, err := s.PruneCount(ctx); err != nil || n != 2 || s.UnrelayedDeleted() != 0 {
		t.Fatalf("pruned %d, %v, counted %d lost; want 2, none lost", n, err, s.UnrelayedDeleted())
	}
	// Two hours later all three left are past retention; the centre had none of them.
	if n, err := s.PruneAge(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 3 || s.UnrelayedDeleted() != 3 {
		t.Fatalf("pruned %d by age, %v, counted %d lost; want 3 and 3", n, err, s.UnrelayedDeleted())
	}
	s.Close()
	// The mark was written down: a restart while the centre is away still counts.
	s = open(t, dir, Config{MaxPerDevice: 3, Retention: time.Hour})
	if _, err := s.Append(ctx, note("cam-1", "n")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneAge(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 1 || s.UnrelayedDeleted() != 1 {
		t.Fatalf("after a restart: pruned %d, %v, counted %d lost", n, err, s.UnrelayedDeleted())
	}
	// A centre restored from a backup has only up to the first id of this run's: what
	// retention deletes above it is lost to the centre again, however far the mark had
	// gone before.
	later, err := s.Append(ctx, note("cam-1", "n"), note("cam-1", "n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRelayedUpTo(ctx, later[1].ID, true); err != nil {
		t.Fatal(err)
	}
	if prev, err := s.RestartRelayAt(ctx, later[0].ID-1); err != nil || prev != later[1].ID {
		t.Fatalf("restart at the centre's lower mark: replaced %d, %v; want %d", prev, err, later[1].ID)
	}
	s.Close()
	s = open(t, dir, Config{MaxPerDevice: 3, Retention: time.Hour})
	if n, err := s.PruneAge(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 2 || s.UnrelayedDeleted() != 2 {
		t.Fatalf("after the centre went back: pruned %d, %v, counted %d lost; want 2 and 2", n, err, s.UnrelayedDeleted())
	}
}

// A store moved past n ids gives its next notification an id at least n above the ids it
// gave before, across a restart (a restore from a backup does this).
func TestSkipIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Config{})
	got, err := s.Append(ctx, note("cam-1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := s.InsertCommand(ctx, cmd("cam-1", "zoom"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	loc := location(t, dir)
	moved, err := SkipIDs(ctx, loc, 1_000_000)
	if err != nil || moved == sqldb.IsDSN(loc) {
		t.Fatalf("skip: moved %v, %v", moved, err)
	}
	s = open(t, dir, Config{})
	next, err := s.Append(ctx, note("cam-1", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if sqldb.IsDSN(loc) {
		if next[0].ID <= got[0].ID {
			t.Fatalf("ids went back: %d after %d", next[0].ID, got[0].ID)
		}
		return // a shared store is not the data folder's: nothing to skip
	}
	if next[0].ID < got[0].ID+1_000_000 {
		t.Fatalf("the next id is %d, want at least %d", next[0].ID, got[0].ID+1_000_000)
	}
	if c, err := s.InsertCommand(ctx, cmd("cam-1", "pan")); err != nil || c.ID < sent.ID+1_000_000 {
		t.Fatalf("the next command id is %d (%v), want at least %d", c.ID, err, sent.ID+1_000_000)
	}
	if moved, err := SkipIDs(ctx, t.TempDir(), 5); err != nil || moved {
		t.Fatalf("a folder without a store: moved %v, %v", moved, err)
	}
}
