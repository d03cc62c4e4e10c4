package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

func TestMain(m *testing.M) { pgscratch.Twice(m) }

// location is where a test's store lives (pgscratch.Location).
func location(t testing.TB, dir string) string { return pgscratch.Location(t, dir) }

// pgOnly skips what needs several hubs on one database.
func pgOnly(t *testing.T) {
	t.Helper()
	if !pgscratch.OnPostgres() {
		t.Skip("several hubs share a store only on PostgreSQL")
	}
}

func open(t *testing.T, dir string, cfg Config) *Store {
	t.Helper()
	if cfg.DeviceRate == 0 {
		cfg.LiftDeviceBudgets() // these tests check order and durability; guard_test the budgets
	}
	// max_per_device by the hourly pass alone, which these tests call (guard_test checks
	// it at write time).
	s, err := Open(context.Background(), location(t, dir), cfg, Options{hourlyCapOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func note(dev, name string) Notification {
	return Notification{Device: dev, Name: name, Parameters: json.RawMessage(`{"v":1}`)}
}

func TestAppendIsDurableAndOrdered(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Config{})
	ctx := context.Background()
	var all []Notification
	for i := range 5 {
		got, err := s.Append(ctx, note("dev1", "temp"), note("dev2", "temp"))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		all = append(all, got...)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID || !all[i].Timestamp.After(all[i-1].Timestamp) {
			t.Fatalf("ids and timestamps must increase: %+v then %+v", all[i-1], all[i])
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName)); !pgscratch.OnPostgres() && (err != nil || fi.Mode().Perm() != 0o600) {
		t.Fatalf("store file: %v %v", fi.Mode(), err)
	}
	s.Close()
	// Reopened: everything is there and new ids continue past the old ones.
	s = open(t, dir, Config{})
	got, err := s.List(ctx, Filter{Devices: []string{"dev1"}})
	if err != nil || len(got) != 5 {
		t.Fatalf("after reopen: %d notifications of dev1, %v", len(got), err)
	}
	if string(got[0].Parameters) != `{"v":1}` || got[0].Name != "temp" {
		t.Fatalf("stored %+v", got[0])
	}
	more, err := s.Append(ctx, note("dev1", "temp"))
	if err != nil || more[0].ID <= all[len(all)-1].ID || !more[0].Timestamp.After(all[len(all)-1].Timestamp) {
		t.Fatalf("after reopen: %+v %v", more, err)
	}
	one, err := s.Get(ctx, "dev1", more[0].ID)
	if err != nil || one.ID != more[0].ID {
		t.Fatalf("get: %+v %v", one, err)
	}
	if _, err := s.Get(ctx, "dev2", more[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another device's notification must not be found: %v", err)
	}
}

func TestInvalidNotificationStoresNothing(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx := context.Background()
	for _, bad := range []Notification{
		{Device: "dev1"},
		{Device: "dev1", Name: "x", Parameters: json.RawMessage(`{"v":`)},
		{Device: "dev1", Name: string(make([]byte, MaxNameLen+1))},
		{Name: "x"},
	} {
		if _, err := s.Append(ctx, note("dev1", "ok"), bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if got, _ := s.List(ctx, Filter{}); len(got) != 0 {
		t.Fatalf("a call with an invalid notification stored %d", len(got))
	}
}

func TestListFiltersSortsAndPages(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx := context.Background()
	var stored []Notification
	for _, n := range []string{"b", "a", "c", "a"} {
		got, err := s.Append(ctx, note("dev1", n))
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, got...)
	}
	s.Append(ctx, note("dev2", "a"))
	cases := []struct {
		f    Filter
		want []int64
	}{
		{Filter{Devices: []string{"dev1"}}, ids(stored...)},
		{Filter{Devices: []string{"dev1"}, Desc: true, Take: 2}, ids(stored[3], stored[2])},
		{Filter{Devices: []string{"dev1"}, Skip: 3}, ids(stored[3])},
		{Filter{Devices: []string{"dev1"}, Names: []string{"a"}}, ids(stored[1], stored[3])},
		{Filter{Devices: []string{"dev1"}, SortBy: SortByNotification}, ids(stored[1], stored[3], stored[0], stored[2])},
		{Filter{Devices: []string{"dev1"}, Start: stored[1].Timestamp, End: stored[2].Timestamp}, ids(stored[1], stored[2])},
		{Filter{Devices: []string{"dev1"}, After: stored[2].Timestamp}, ids(stored[3])},
		{Filter{Devices: []string{}}, nil},
	}
	for i, c := range cases {
		got, err := s.List(ctx, c.f)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if g := ids(got...); !equal(g, c.want) {
			t.Errorf("case %d: %v, want %v", i, g, c.want)
		}
	}
	if _, err := s.List(ctx, Filter{SortBy: "name; DROP TABLE notifications"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown sort field: %v", err)
	}
}

func ids(ns ...Notification) []int64 {
	var out []int64
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPollWaitsForANewNotification(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx := context.Background()
	old, _ := s.Append(ctx, note("dev1", "old"))
	// A cursor before the old one returns it at once.
	got, err := s.Poll(ctx, Filter{Devices: []string{"dev1"}, After: old[0].Timestamp.Add(-time.Microsecond)})
	if err != nil || len(got) != 1 || got[0].ID != old[0].ID {
		t.Fatalf("poll with an older cursor: %+v %v", got, err)
	}
	// No cursor: only what arrives from now on; another device's does not wake it.
	res := make(chan []Notification, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		got, _ := s.Poll(ctx, Filter{Devices: []string{"dev1"}})
		res <- got
	}()
	<-started
	// The poll may begin after these appends: keep appending until it answers.
	for {
		s.Append(ctx, note("dev2", "other"))
		new, _ := s.Append(ctx, note("dev1", "new"))
		select {
		case got := <-res:
			for _, n := range got {
				if n.Device != "dev1" || n.Name != "new" || n.ID > new[0].ID {
					t.Fatalf("poll returned %+v", n)
				}
			}
			return
		default:
		}
	}
}

func TestPollEndsEmptyAtTimeout(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := s.Poll(ctx, Filter{})
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("an ended poll answers an empty list: %v %v", got, err)
	}
}

func TestStreamCatchesUpThenFollows(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, _ := s.Append(ctx, note("dev1", "a"))
	s.Append(ctx, note("dev1", "b"), note("dev2", "x"))
	var mu sync.Mutex
	var seen []string
	done := make(chan error, 1)
	go func() {
		done <- s.Stream(ctx, Filter{Devices: []string{"dev1"}, After: first[0].Timestamp.Add(-time.Microsecond)}, func(ns []Notification) error {
			mu.Lock()
			defer mu.Unlock()
			for _, n := range ns {
				seen = append(seen, n.Name)
			}
			if len(seen) >= 3 {
				return errors.New("enough")
			}
			return nil
		})
	}()
	for {
		s.Append(ctx, note("dev1", "c"))
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			if len(seen) < 3 || seen[0] != "a" || seen[1] != "b" || seen[2] != "c" {
				t.Fatalf("stream saw %v, want a b c first, each once", seen)
			}
			return
		default:
		}
	}
}

func TestFullQueueIsRefusedNotQueued(t *testing.T) {
	s := open(t, t.TempDir(), Config{QueueDepth: 4})
	ctx := context.Background()
	// Hold the writer inside a maintenance transaction.
	hold, held := make(chan struct{}), make(chan struct{})
	go s.maintain(ctx, func(*sqldb.Tx) error { close(held); <-hold; return nil })
	<-held
	results := make(chan error, 4)
	for range 4 {
		go func() { _, err := s.Append(ctx, note("dev1", "q")); results <- err }()
	}
	for s.Queued() < 4 {
		runtime.Gosched() // until the four goroutines have queued
	}
	if _, err := s.Append(ctx, note("dev1", "over")); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("append past the queue: %v, want ErrOverloaded", err)
	}
	close(hold)
	for range 4 {
		if err := <-results; err != nil {
			t.Fatalf("a queued append failed: %v", err)
		}
	}
	got, _ := s.List(ctx, Filter{})
	if len(got) != 4 {
		t.Fatalf("stored %d, want the 4 queued ones", len(got))
	}
}

func TestRetentionByCountAndAge(t *testing.T) {
	s := open(t, t.TempDir(), Config{MaxPerDevice: 3, Retention: time.Hour})
	ctx := context.Background()
	for range 5 {
		s.Append(ctx, note("dev1", "n"))
	}
	s.Append(ctx, note("dev2", "n"))
	n, err := s.Prune(ctx, time.Now())
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want the 2 oldest of dev1", n, err)
	}
	got, _ := s.List(ctx, Filter{Devices: []string{"dev1"}})
	if len(got) != 3 {
		t.Fatalf("dev1 keeps %d", len(got))
	}
	// Two hours later everything is past retention.
	if n, err := s.Prune(ctx, time.Now().Add(2*time.Hour)); err != nil || n != 4 {
		t.Fatalf("pruned %d by age, %v", n, err)
	}
}

// openRemoving opens the store at dir with a remover that reports each time it has
// deleted every removal's notifications on done.
func openRemoving(t *testing.T, dir string, o Options) (*Store, <-chan struct{}) {
	t.Helper()
	done := make(chan struct{}, 16)
	o.removalsDone = func() { done <- struct{}{} }
	s, err := Open(context.Background(), location(t, dir), Config{}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	<-done // the pass at start
	return s, done
}

// stored counts what the table holds of device, removed or not.
func stored(t *testing.T, s *Store, device string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM notifications WHERE device=?`, device).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A removed device's notifications are gone for readers when RemoveDevice returns,
// and from the table once the remover has run.
func TestRemoveDevice(t *testing.T) {
	s, removed := openRemoving(t, t.TempDir(), Options{})
	ctx := context.Background()
	got, err := s.Append(ctx, note("dev1", "n"), note("dev1", "n"), note("dev2", "n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.List(ctx, Filter{}); len(left) != 1 || left[0].Device != "dev2" {
		t.Fatalf("readers see %+v", left)
	}
	if _, err := s.Get(ctx, "dev1", got[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a removed device's notification: %v", err)
	}
	<-removed
	if n := stored(t, s, "dev1"); n != 0 {
		t.Fatalf("%d of dev1 left in the table", n)
	}
	if n, err := s.PendingRemovals(ctx); err != nil || n != 0 {
		t.Fatalf("pending removals %d, %v", n, err)
	}
	// Nothing stored: nothing to do.
	if err := s.RemoveDevice(ctx, "nobody"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.PendingRemovals(ctx); n != 0 {
		t.Fatalf("a removal of a device without notifications: %d pending", n)
	}
}

// A removal the hub could not finish (it stopped, or crashed, after the removal
// committed) hides the notifications meanwhile and is finished by the next Open.
func TestRemovalCutShortGoesOnAtTheNextOpen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s1, err := Open(ctx, location(t, dir), Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s1, "dev1", 25)
	// As after a crash: the removal is recorded, nothing is deleted yet.
	s1.unremove()
	<-s1.removerDone
	if err := s1.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s1.List(ctx, Filter{Devices: []string{"dev1"}}); len(got) != 0 {
		t.Fatalf("readers see %d of a removed device", len(got))
	}
	if n := stored(t, s1, "dev1"); n != 25 {
		t.Fatalf("%d in the table before the remover ran; want 25", n)
	}
	s1.Close()

	s2, _ := openRemoving(t, dir, Options{}) // its remover's first pass has run
	if n := stored(t, s2, "dev1"); n != 0 {
		t.Fatalf("%d of dev1 left after the next open", n)
	}
	if n, err := s2.PendingRemovals(ctx); err != nil || n != 0 {
		t.Fatalf("pending removals %d, %v", n, err)
	}
}

// openChunked opens a store that deletes chunk notifications per transaction and runs
// between(i) after the i-th chunk (from 1), while the writer is free.
func openChunked(t *testing.T, cfg Config, chunk int, between func(i int)) *Store {
	t.Helper()
	i := 0
	cfg.LiftDeviceBudgets()
	// The hourly pass alone deletes here, so that its chunks are the ones counted.
	s, err := Open(context.Background(), location(t, t.TempDir()), cfg, Options{deleteChunk: chunk, hourlyCapOnly: true, chunkDone: func() {
		i++
		between(i)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// appendN stores n notifications of dev, one per request.
func appendN(t *testing.T, s *Store, dev string, n int) {
	t.Helper()
	for range n {
		if _, err := s.Append(context.Background(), note(dev, "old")); err != nil {
			t.Fatal(err)
		}
	}
}

// A notification sent while retention deletes is committed between two chunks, not
// after the last: a large deletion does not hold every device's answer.
func TestRetentionByAgeDeletesInChunks(t *testing.T) {
	ctx := context.Background()
	var s *Store
	var chunks int
	s = openChunked(t, Config{Retention: time.Nanosecond}, 10, func(i int) {
		chunks = i
		if i == 1 {
			if _, err := s.Append(ctx, note("dev2", "new")); err != nil {
				t.Error(err)
			}
		}
	})
	appendN(t, s, "dev1", 35)
	n, err := s.PruneAge(ctx, time.Now())
	if err != nil || n != 35 {
		t.Fatalf("pruned %d, %v; want the 35 older ones", n, err)
	}
	if chunks != 3 {
		t.Fatalf("%d full chunks of 10, want 3 (then one of 5)", chunks)
	}
	if got, _ := s.List(ctx, Filter{}); len(got) != 1 || got[0].Name != "new" {
		t.Fatalf("left %+v; want the one sent during the deletion", got)
	}
}

// By count, the oldest past the limit go, in chunks; one sent meanwhile is kept.
func TestRetentionByCountDeletesInChunks(t *testing.T) {
	ctx := context.Background()
	var s *Store
	s = openChunked(t, Config{MaxPerDevice: 3}, 10, func(i int) {
		if i == 1 {
			if _, err := s.Append(ctx, note("dev1", "new")); err != nil {
				t.Error(err)
			}
		}
	})
	appendN(t, s, "dev1", 25)
	appendN(t, s, "dev2", 3)
	all, _ := s.List(ctx, Filter{Devices: []string{"dev1"}})
	n, err := s.PruneCount(ctx)
	if err != nil || n != 22 {
		t.Fatalf("pruned %d, %v; want dev1's 22 oldest", n, err)
	}
	got, _ := s.List(ctx, Filter{Devices: []string{"dev1"}})
	if len(got) != 4 || got[0].ID != all[22].ID || got[3].Name != "new" {
		t.Fatalf("dev1 keeps %+v; want its 3 newest and the one sent during the deletion", got)
	}
	if got, _ := s.List(ctx, Filter{Devices: []string{"dev2"}}); len(got) != 3 {
		t.Fatalf("dev2 at the limit keeps %d", len(got))
	}
}

// The devices over the limit are found however many devices there are: on SQLite the
// index is read a slice of devices at a time, and the last slice counts too.
func TestRetentionByCountFindsDevicesInEverySlice(t *testing.T) {
	ctx := context.Background()
	cfg := Config{MaxPerDevice: 1}
	cfg.LiftDeviceBudgets()
	s, err := Open(ctx, location(t, t.TempDir()), cfg, Options{hourlyCapOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var batch []Notification
	for i := range countSlice + 6 {
		batch = append(batch, note(fmt.Sprintf("d%03d", i), "n"))
	}
	for _, d := range []string{"d003", fmt.Sprintf("d%03d", countSlice+4)} {
		batch = append(batch, note(d, "n"), note(d, "n"))
	}
	if _, err := s.Append(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneCount(ctx); err != nil || n != 4 {
		t.Fatalf("pruned %d, %v; want 2 of each of the two devices over the limit", n, err)
	}
	if got, _ := s.List(ctx, Filter{Take: 1000}); len(got) != countSlice+6 {
		t.Fatalf("%d left, want one per device", len(got))
	}
}

// The WAL file is cut back when it restarts, whatever size a held-back checkpoint let
// it reach (the limit is in the DSN, so every connection of the pool has it).
func TestWALSizeIsLimited(t *testing.T) {
	if pgscratch.OnPostgres() {
		t.Skip("SQLite's WAL")
	}
	s := open(t, t.TempDir(), Config{})
	var limit int64
	if err := s.db.QueryRowContext(context.Background(), `PRAGMA journal_size_limit`).Scan(&limit); err != nil || limit != walSizeLimit {
		t.Fatalf("journal_size_limit %d, %v; want %d", limit, err, walSizeLimit)
	}
}

// A device removed and added again under the same name while its notifications are
// being deleted keeps what the new one sends.
func TestRemoveDeviceKeepsWhatANewDeviceOfTheNameSends(t *testing.T) {
	ctx := context.Background()
	var s *Store
	i := 0
	s, removed := openRemoving(t, t.TempDir(), Options{deleteChunk: 10, chunkDone: func() {
		if i++; i == 1 {
			if _, err := s.Append(ctx, note("dev1", "new")); err != nil {
				t.Error(err)
			}
		}
	}})
	appendN(t, s, "dev1", 25)
	if err := s.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	<-removed
	if got, _ := s.List(ctx, Filter{}); len(got) != 1 || got[0].Name != "new" {
		t.Fatalf("left %+v", got)
	}
	if n := stored(t, s, "dev1"); n != 1 {
		t.Fatalf("%d of dev1 in the table; want the new one", n)
	}
}

// The registry removed a device at t and a device of the same name was enrolled since:
// what it stored after t stays.
func TestRemoveDeviceBefore(t *testing.T) {
	s, removed := openRemoving(t, t.TempDir(), Options{})
	ctx := context.Background()
	appendN(t, s, "dev1", 3)
	at := time.Now()
	if _, err := s.Append(ctx, note("dev1", "new")); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDeviceBefore(ctx, "dev1", at); err != nil {
		t.Fatal(err)
	}
	<-removed
	if got, _ := s.List(ctx, Filter{}); len(got) != 1 || got[0].Name != "new" {
		t.Fatalf("left %+v", got)
	}
	if applied, err := s.RemovalsApplied(ctx); err != nil || applied != 0 {
		t.Fatalf("removals applied %d, %v; want 0 on a new store", applied, err)
	}
	for _, id := range []int64{7, 5} { // never goes back
		if err := s.SetRemovalsApplied(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := s.RemovalsApplied(ctx); err != nil || applied != 7 {
		t.Fatalf("removals applied %d, %v; want 7", applied, err)
	}
}

func TestCloseCommitsWhatIsQueued(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), location(t, dir), Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ok sync.Map
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Append(context.Background(), note("dev1", "n")); err == nil {
				ok.Store(i, true)
			}
		}()
	}
	wg.Wait()
	s.Close()
	if _, err := s.Append(context.Background(), note("dev1", "late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	s = open(t, dir, Config{})
	got, _ := s.List(context.Background(), Filter{Take: MaxTake})
	acked := 0
	ok.Range(func(any, any) bool { acked++; return true })
	if len(got) != acked {
		t.Fatalf("%d acknowledged, %d stored", acked, len(got))
	}
}

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 11, 23, 10, 0, 1, 123456000, time.UTC)
	for _, s := range []string{"2026-11-23T10:00:01.123456", "2026-11-23T10:00:01.123456Z", "2026-11-23T11:00:01.123456+01:00"} {
		got, err := ParseTime(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %v %v", s, got, err)
		}
	}
	if got := FormatTime(want); got != "2026-11-23T10:00:01.123456" {
		t.Errorf("format: %s", got)
	}
	for _, bad := range []string{"", "yesterday", "2026-13-01T00:00:00"} {
		if _, err := ParseTime(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseTime(f *testing.F) {
	f.Add("2026-11-23T10:00:01.123")
	f.Add("2026-11-23T10:00:01Z")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		if err != nil {
			return
		}
		// What parses round-trips at microsecond precision.
		again, err := ParseTime(FormatTime(got))
		if err != nil || !again.Equal(got.Truncate(time.Microsecond)) {
			t.Fatalf("%q -> %v -> %v %v", s, got, again, err)
		}
	})
}

// BenchmarkAppendParallel is many devices each waiting for its notification to be
// durable: the rate group commit reaches.
func BenchmarkAppendParallel(b *testing.B) {
	s, err := Open(context.Background(), location(b, b.TempDir()), Config{}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetParallelism(64)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// Devices interleave as in a fleet: each row lands on another leaf of the
		// per-device index.
		n := Notification{Device: fmt.Sprintf("dev%d", next.Add(1)%640), Name: "uuid", Parameters: json.RawMessage(`"0f8fad5b-d9cb-469f-a165-70867728950e"`)}
		for pb.Next() {
			if _, err := s.Append(context.Background(), n); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The metrics see every committed notification once, with the wait and commit times an
// operator reads to tell a slow disk from a saturated writer.
func TestMetricsCountEveryCommittedNotification(t *testing.T) {
	m := NewMetrics()
	s, err := Open(context.Background(), location(t, t.TempDir()), Config{}, Options{Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Append(context.Background(), note("dev1", "a"), note("dev1", "b")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors(s)...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, x := range f.GetMetric() {
			switch {
			case x.GetHistogram() != nil:
				got[f.GetName()] = float64(x.GetHistogram().GetSampleCount())
				if f.GetName() == "iotsafe_telemetry_batch_notifications" {
					got["batched"] = x.GetHistogram().GetSampleSum()
				}
			case x.GetCounter() != nil:
				got[f.GetName()] = x.GetCounter().GetValue()
			case x.GetGauge() != nil:
				got[f.GetName()] = x.GetGauge().GetValue()
			}
		}
	}
	batches := got["iotsafe_telemetry_commit_seconds"]
	if got["iotsafe_telemetry_committed_total"] != 40 || got["batched"] != 40 || batches < 1 || batches > 20 ||
		got["iotsafe_telemetry_queue_wait_seconds"] != batches || got["iotsafe_telemetry_queue"] != 0 ||
		got["iotsafe_telemetry_append_seconds"] != 20 { // one per call, whatever the batches
		t.Fatalf("metrics after 40 notifications in 20 calls: %v", got)
	}
}

// batchSizes records the size of each committed batch.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) Committed(batch, _ int, _, _ time.Duration) {
	b.mu.Lock()
	b.sizes = append(b.sizes, batch)
	b.mu.Unlock()
}

func (b *batchSizes) get() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sizes)
}

// concurrentBatch commits n appends as one batch: the writer is held in a maintenance
// transaction until all n are queued. It returns when they are committed.
func concurrentBatch(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	hold, held := make(chan struct{}), make(chan struct{})
	go s.maintain(ctx, func(*sqldb.Tx) error { close(held); <-hold; return nil })
	<-held
	results := make(chan error, n)
	for i := range n {
		go func() { _, err := s.Append(ctx, note(fmt.Sprintf("dev%d", i), "together")); results <- err }()
	}
	for s.Queued() < n {
		runtime.Gosched() // until all are queued behind the held writer
	}
	close(hold)
	for range n {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}

// Group commit: after a batch of several clients, what arrives while the interval since
// that commit runs waits for it and is committed together, in one transaction.
func TestCommitIntervalGathersWhatArrivesMeanwhile(t *testing.T) {
	obs := &batchSizes{}
	waits := make(chan time.Duration, 1)
	release := make(chan struct{})
	hook := func(wait time.Duration, senders int, _ <-chan struct{}) {
		if senders != 0 {
			t.Errorf("the writer waited for %d steady senders after one batch", senders)
		}
		waits <- wait
		<-release
	}
	s, err := Open(context.Background(), location(t, t.TempDir()), Config{CommitInterval: time.Hour},
		Options{Observer: obs, linger: hook})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	concurrentBatch(t, s, commitSiblings)
	results := make(chan error, 10)
	for i := range 10 {
		go func() {
			_, err := s.Append(context.Background(), note(fmt.Sprintf("dev%d", i), "later"))
			results <- err
		}()
	}
	if w := <-waits; w <= 0 || w > time.Hour {
		t.Fatalf("the writer waited %s, want the rest of the hour", w)
	}
	for s.Queued() < 10 {
		runtime.Gosched() // until all ten are queued behind the waiting writer
	}
	close(release)
	for range 10 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := obs.get(); !slices.Equal(got, []int{commitSiblings, 10}) {
		t.Fatalf("batches %v, want [%d 10]: the ten that came within the interval in one commit", got, commitSiblings)
	}
}

// A few clients sending one notification after the other, each waiting for its answer
// (bridges, gateways relaying their devices), are not held to one round per interval:
// once steadyBatches batches in a row held the same number of requests, the writer waits
// for that many only. With an interval of an hour each round would otherwise take one.
func TestCommitIntervalLetsSteadySendersThrough(t *testing.T) {
	const clients, rounds = 4, 12
	obs := &batchSizes{}
	var s *Store
	var mu sync.Mutex
	var steady []int
	hook := func(wait time.Duration, senders int, _ <-chan struct{}) {
		if senders == 0 {
			// As if the interval passed once every client had sent: the batches
			// become steady.
			for len(s.queue)+1 < clients {
				runtime.Gosched()
			}
			return
		}
		mu.Lock()
		steady = append(steady, senders)
		mu.Unlock()
		s.waitFor(wait, senders) // the real wait: an hour, unless the senders end it
	}
	var err error
	s, err = Open(context.Background(), location(t, t.TempDir()), Config{CommitInterval: time.Hour},
		Options{Observer: obs, linger: hook})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	concurrentBatch(t, s, clients) // the first batch of several: the writer waits from now on
	// The clients move in step, as behind a shared commit: each round starts when
	// every answer of the last one came.
	for round := range rounds {
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Append(context.Background(), note(fmt.Sprintf("gw%d", c), fmt.Sprint(round))); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	// The first batch and three rounds make four equal batches; the nine rounds after
	// them wait for the four clients.
	if want := slices.Repeat([]int{clients}, rounds+1-steadyBatches); !slices.Equal(steady, want) {
		t.Errorf("waits for steady senders: %v, want %v", steady, want)
	}
	if got, want := obs.get(), slices.Repeat([]int{clients}, rounds+1); !slices.Equal(got, want) {
		t.Errorf("batches %v, want %v", got, want)
	}
}

// One client sending one notification after the other is never made to wait: each
// waits for its answer, so nothing would join its batch.
func TestCommitIntervalDoesNotSlowOneClient(t *testing.T) {
	obs := &batchSizes{}
	hook := func(wait time.Duration, _ int, _ <-chan struct{}) { t.Errorf("a lone client waited %s", wait) }
	s, err := Open(context.Background(), location(t, t.TempDir()), Config{CommitInterval: time.Hour},
		Options{Observer: obs, linger: hook})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 5 {
		if _, err := s.Append(context.Background(), note("dev1", "next")); err != nil {
			t.Fatal(err)
		}
	}
	if got := obs.get(); !slices.Equal(got, []int{1, 1, 1, 1, 1}) {
		t.Fatalf("batches %v", got)
	}
}

// Close does not wait for the interval: what is queued is committed and acknowledged.
func TestCloseCutsTheCommitInterval(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), location(t, dir), Config{CommitInterval: time.Hour}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	concurrentBatch(t, s, commitSiblings)
	result := make(chan error, 1)
	go func() { _, err := s.Append(ctx, note("dev1", "last")); result <- err }()
	for s.Queued() < 1 {
		runtime.Gosched()
	}
	s.Close()
	if err := <-result; err != nil {
		t.Fatalf("the notification queued when Close came: %v", err)
	}
	s = open(t, dir, Config{})
	if got, _ := s.List(ctx, Filter{}); len(got) != commitSiblings+1 {
		t.Fatalf("stored %d, want %d", len(got), commitSiblings+1)
	}
}
