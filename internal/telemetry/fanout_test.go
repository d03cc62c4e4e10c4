package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A subscriber sees every commit, in order, whichever way it was
// appended (Append, AppendOnce, AppendRelayed), with the ids and timestamps stored.
func TestSubscriberSeesEveryCommitInOrder(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan Notification, 16)
	wait := s.Subscribe(ctx, func(ns []Notification) {
		for _, n := range ns {
			seen <- n
		}
	})
	defer func() { cancel(); wait() }()
	s.Append(ctx, note("dev1", "a"), note("dev2", "b"))
	s.AppendOnce(ctx, Once{Key: "k1", Until: time.Now().Add(time.Hour)}, note("dev1", "once"))
	s.AppendOnce(ctx, Once{Key: "k1", Until: time.Now().Add(time.Hour)}, note("dev1", "replayed")) // a used key: not stored
	s.AppendRelayed(ctx, "gw/x", 2, []Relayed{{Origin: 1, Notification: note("dev9", "relayed")}})
	s.Append(ctx, note("dev1", "end"))
	var got []string
	var last int64
	for n := range seen {
		if n.ID <= last || n.Timestamp.IsZero() {
			t.Fatalf("%s has id %d after %d, timestamp %v", n.Name, n.ID, last, n.Timestamp)
		}
		last = n.ID
		got = append(got, n.Name)
		if n.Name == "end" {
			break
		}
	}
	if fmt.Sprint(got) != "[a b once relayed end]" {
		t.Fatalf("the subscriber saw %v", got)
	}
}

// The durable hook holds what the store accepts before its appender is answered; when it
// refuses, the appender hears ErrOverloaded (and sends again), while what the store
// refuses itself never reaches the hook.
func TestDurableHook(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir(), Config{})
	var mu sync.Mutex
	var held []string
	var refuse error
	s.SetDurableHook(func(ctx context.Context, ns []Notification) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse != nil {
			return refuse
		}
		for _, n := range ns {
			held = append(held, n.Name)
		}
		return nil
	})
	if _, err := s.Append(ctx, note("dev1", "a"), note("dev1", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, note("dev1", "")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an invalid notification: %v", err)
	}
	mu.Lock()
	refuse = errors.New("queue full")
	mu.Unlock()
	_, err := s.Append(ctx, note("dev1", "refused"))
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("the hook refused, Append said %v; want ErrOverloaded", err)
	}
	list, _ := s.List(ctx, Filter{Devices: []string{"dev1"}})
	if len(list) != 3 {
		t.Fatalf("the store holds %d notifications, want 3 (what the hook refused is stored and will come again)", len(list))
	}
	// A relayed batch the hook refuses is not stored: the gateway sends it again.
	if _, _, _, err := s.AppendRelayed(ctx, "gw/x", 1, []Relayed{{Origin: 1, Notification: note("dev9", "r1")}}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("relayed, refused by the hook: %v", err)
	}
	mu.Lock()
	refuse = nil
	mu.Unlock()
	if _, _, _, err := s.AppendRelayed(ctx, "gw/x", 1, []Relayed{{Origin: 1, Notification: note("dev9", "r1")}}); err != nil {
		t.Fatal(err)
	}
	// Sent again after it was stored: above the mark no more, so not held twice.
	if _, dups, _, err := s.AppendRelayed(ctx, "gw/x", 1, []Relayed{{Origin: 1, Notification: note("dev9", "r1")}}); err != nil || dups != 1 {
		t.Fatalf("a relayed duplicate: %d %v", dups, err)
	}
	s.SetDurableHook(nil)
	s.Append(ctx, note("dev1", "unhooked"))
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(held) != "[a b r1]" {
		t.Fatalf("the hook held %v, want [a b r1]", held)
	}
}
