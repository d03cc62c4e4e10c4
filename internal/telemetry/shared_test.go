package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Several hubs append to one PostgreSQL store at once while a reader at a third
// follows it: the reader gets every notification exactly once, in timestamp order
// with ids rising alike, and a long poll at one hub wakes for another hub's append.
func TestHubsShareOneStore(t *testing.T) {
	pgOnly(t)
	dir := t.TempDir()
	a, b, reader := open(t, dir, Config{}), open(t, dir, Config{}), open(t, dir, Config{})
	if !a.Shared() || !b.Shared() {
		t.Fatal("a store on PostgreSQL must say it is shared")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A poll at b with no cursor wakes for a's notification, and only for what came after it.
	before, _ := a.Append(ctx, note("dev1", "before"))
	res := make(chan []Notification, 1)
	go func() {
		got, _ := b.Poll(ctx, Filter{Devices: []string{"dev1"}})
		res <- got
	}()
polled:
	for {
		a.Append(ctx, note("dev1", "after"))
		select {
		case got := <-res:
			for _, n := range got {
				if n.Name != "after" || n.ID <= before[0].ID {
					t.Fatalf("poll at another hub returned %+v", n)
				}
			}
			break polled
		default:
		}
	}

	const writers, each = 4, 50
	cursor, _ := a.Append(ctx, note("mark", "start"))
	var mu sync.Mutex
	var seen []Notification
	done := make(chan error, 1)
	go func() {
		done <- reader.Stream(ctx, Filter{Devices: []string{"dev-a", "dev-b", "end"}, After: cursor[0].Timestamp}, func(ns []Notification) error {
			mu.Lock()
			defer mu.Unlock()
			for _, n := range ns {
				if n.Device == "end" {
					return errors.New("end seen")
				}
				seen = append(seen, n)
			}
			return nil
		})
	}()
	var wg sync.WaitGroup
	var stored sync.Map
	for w := range writers {
		for _, hub := range []struct {
			s   *Store
			dev string
		}{{a, "dev-a"}, {b, "dev-b"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					got, err := hub.s.Append(ctx, note(hub.dev, fmt.Sprintf("w%d-%d", w, i)))
					if err != nil {
						t.Error(err)
						return
					}
					stored.Store(got[0].ID, got[0].Timestamp)
				}
			}()
		}
	}
	wg.Wait()
	// Committed after every writer's last: a reader that skipped nothing has all before it.
	a.Append(ctx, note("end", "end"))
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2*writers*each {
		t.Fatalf("the reader saw %d notifications before the end mark, want %d: a cursor skipped rows another hub committed late", len(seen), 2*writers*each)
	}
	for i, n := range seen {
		ts, ok := stored.Load(n.ID)
		if !ok || !ts.(time.Time).Equal(n.Timestamp) {
			t.Fatalf("the reader saw %+v, which no writer stored as such", n)
		}
		if i > 0 && (!n.Timestamp.After(seen[i-1].Timestamp) || n.ID <= seen[i-1].ID) {
			t.Fatalf("out of order: %+v after %+v", n, seen[i-1])
		}
	}
}

// registry migrate's notification half: a hub's file into an empty shared store keeps
// ids and timestamps, and the database's next id follows them; a second hub's file into
// the now non-empty store is appended with new ids; the shared store copies back into
// a new folder; a folder without a file copies nothing and is left without one.
func TestCopyStores(t *testing.T) {
	pgOnly(t)
	ctx := context.Background()
	fileA, fileB := t.TempDir(), t.TempDir()
	storeAt := func(loc string) *Store {
		s, err := Open(ctx, loc, Config{}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dev := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	sa := storeAt(fileA)
	wantA, err := sa.Append(ctx, note("dev1", "a"), Notification{Device: "dev2", Name: "bare"}, Notification{Device: "dev1", Name: "timed", Parameters: json.RawMessage(`[1,2]`), DeviceTime: &dev})
	if err != nil {
		t.Fatal(err)
	}
	cmdA, err := sa.InsertCommand(ctx, cmd("dev1", "open"))
	if err != nil {
		t.Fatal(err)
	}
	sa.Close()
	sb := storeAt(fileB)
	wantB, _ := sb.Append(ctx, note("dev3", "b"))
	sb.InsertCommand(ctx, cmd("dev3", "close"))
	sb.Close()

	shared := location(t, t.TempDir())
	got, err := Copy(ctx, fileA, shared, nil)
	if err != nil || got.Rows != 3 || !got.KeptIDs || got.Commands != 1 {
		t.Fatalf("copy into an empty store: %+v %v", got, err)
	}
	got, err = Copy(ctx, fileB, shared, nil)
	if err != nil || got.Rows != 1 || got.KeptIDs || got.Commands != 1 {
		t.Fatalf("copy into a store with notifications: %+v %v", got, err)
	}
	s := storeAt(shared)
	// The first store's command kept its id; the second's was appended after it.
	if c, err := s.GetCommand(ctx, "dev1", cmdA.ID); err != nil || c.Name != "open" || !c.Timestamp.Equal(cmdA.Timestamp) {
		t.Fatalf("copied command: %+v %v", c, err)
	}
	if l, _ := s.ListCommands(ctx, CommandFilter{Devices: []string{"dev3"}}); len(l) != 1 || l[0].ID <= cmdA.ID {
		t.Fatalf("appended command: %+v", l)
	}
	if c, err := s.InsertCommand(ctx, cmd("dev1", "next")); err != nil || c.ID <= cmdA.ID+1 {
		t.Fatalf("the next command id after a copy: %+v %v", c, err)
	}
	all, err := s.List(ctx, Filter{Take: MaxTake, SortBy: SortByID})
	if err != nil || len(all) != 4 {
		t.Fatalf("shared store holds %d, %v", len(all), err)
	}
	for i, w := range wantA {
		if fmt.Sprint(all[i]) != fmt.Sprint(w) {
			t.Fatalf("copied %+v, want %+v", all[i], w)
		}
	}
	if all[3].ID <= wantA[2].ID || !all[3].Timestamp.Equal(wantB[0].Timestamp) || all[3].Name != "b" {
		t.Fatalf("appended %+v from %+v", all[3], wantB[0])
	}
	next, err := s.Append(ctx, note("dev1", "next"))
	if err != nil || next[0].ID <= all[3].ID {
		t.Fatalf("the next id after a copy: %+v %v", next, err)
	}
	s.Close()

	back := t.TempDir()
	if got, err := Copy(ctx, shared, back, nil); err != nil || got.Rows != 5 || !got.KeptIDs {
		t.Fatalf("copy back into a folder: %+v %v", got, err)
	}
	if n, err := Count(ctx, back); err != nil || n != 5 {
		t.Fatalf("count after copying back: %d %v", n, err)
	}

	empty := t.TempDir()
	if got, err := Copy(ctx, empty, shared, nil); err != nil || got.Rows != 0 {
		t.Fatalf("copy from a folder without a store: %+v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(empty, FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("counting or copying created a store in the source folder: %v", err)
	}
	if err := RetireLocal(fileA); err != nil {
		t.Fatal(err)
	}
	if n, err := Count(ctx, fileA); err != nil || n != 0 {
		t.Fatalf("a retired file still counts: %d %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(fileA, FileName+MovedSuffix)); err != nil {
		t.Fatalf("the retired file is kept as a backup: %v", err)
	}
}

// A hub's subscribers see every hub's notifications in commit order, each once; this
// hub's own keep the path they came in on (Via), so the broker skips its own messages.
func TestSubscribersSeeEveryHub(t *testing.T) {
	pgOnly(t)
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	a, b := open(t, dir, Config{}), open(t, dir, Config{})
	seen := make(chan Notification, 16)
	wait := a.Subscribe(ctx, func(ns []Notification) {
		for _, n := range ns {
			seen <- n
		}
	})
	defer func() { cancel(); wait() }()
	b.Append(ctx, note("dev2", "x"), note("dev2", "y"))
	own := note("dev1", "own")
	own.Via = "mqtt"
	a.Append(ctx, own)
	b.Append(ctx, note("dev2", "end"))
	var got []string
	for n := range seen {
		got = append(got, n.Name+"/"+n.Via)
		if n.Name == "end" {
			break
		}
	}
	if fmt.Sprint(got) != "[x/ y/ own/mqtt end/]" {
		t.Fatalf("a's subscriber saw %v, want [x/ y/ own/mqtt end/]", got)
	}
}

// Counting a database the store never used says 0 and creates nothing there.
func TestCountLeavesAnUnusedDatabaseAlone(t *testing.T) {
	pgOnly(t)
	ctx := context.Background()
	dsn := location(t, t.TempDir())
	if n, err := Count(ctx, dsn); err != nil || n != 0 {
		t.Fatalf("count of an unused database: %d %v", n, err)
	}
	db, err := sqldb.OpenPostgres(ctx, dsn, sqldb.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var made bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('notifications') IS NOT NULL`).Scan(&made); err != nil || made {
		t.Fatalf("counting made the store's table: %v %v", made, err)
	}
	db.Close()
	s, err := Open(ctx, dsn, Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Append(ctx, note("dev1", "one"))
	s.Close()
	if n, err := Count(ctx, dsn); err != nil || n != 1 {
		t.Fatalf("count: %d %v", n, err)
	}
}

// A removal whose notifications are not deleted yet travels with them: a copy never
// shows a removed device's notifications again.
func TestCopyCarriesPendingRemovals(t *testing.T) {
	ctx := context.Background()
	from := t.TempDir() // a hub's own file in both passes
	s, err := Open(ctx, from, Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, "dev1", 3)
	appendN(t, s, "dev2", 1)
	s.unremove() // as if the hub stopped before deleting them
	<-s.removerDone
	if err := s.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	toDir := t.TempDir()
	if got, err := Copy(ctx, from, location(t, toDir), nil); err != nil || got.Rows != 4 {
		t.Fatalf("copy: %+v %v", got, err)
	}
	d := open(t, toDir, Config{})
	if got, _ := d.List(ctx, Filter{}); len(got) != 1 || got[0].Device != "dev2" {
		t.Fatalf("the copy shows %+v", got)
	}
}

// Empty leaves a store with no notification (the labs empty the store between runs),
// and leaves a place without a store as it is.
func TestEmpty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	loc := location(t, dir)
	if err := Empty(ctx, loc); err != nil {
		t.Fatalf("emptying where no store is: %v", err)
	}
	s := open(t, dir, Config{})
	appendN(t, s, "dev1", 3)
	appendN(t, s, "dev2", 2)
	s.Close()
	if err := Empty(ctx, loc); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, Config{})
	got, err := s.List(ctx, Filter{})
	if err != nil || len(got) != 0 {
		t.Fatalf("after Empty: %d notifications, %v", len(got), err)
	}
	if n, err := Count(ctx, loc); err != nil || n != 0 {
		t.Fatalf("count after Empty: %d %v", n, err)
	}
}
