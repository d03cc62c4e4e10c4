package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func cmd(dev, name string) Command {
	return Command{Device: dev, Name: name, Parameters: json.RawMessage(`{"on":true}`), UserID: 7}
}

// A command is stored with its sender, listed and read back; answering it sets its
// status and result and moves LastUpdated, which polls for answers follow; a command
// the store refuses leaves nothing behind.
func TestCommandLifecycle(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx := context.Background()
	for _, bad := range []Command{
		{Device: "dev1"},
		{Device: "dev1", Name: "x", Parameters: json.RawMessage(`{"on":`)},
		{Device: "dev1", Name: "x", Lifetime: -1},
		{Device: "dev1", Name: "x", Result: json.RawMessage(`nope`)},
	} {
		if _, err := s.InsertCommand(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if got, _ := s.ListCommands(ctx, CommandFilter{}); len(got) != 0 {
		t.Fatalf("refused commands were stored: %+v", got)
	}

	on, err := s.InsertCommand(ctx, cmd("dev1", "switch"))
	if err != nil || on.ID == 0 || on.Timestamp.IsZero() || !on.LastUpdated.Equal(on.Timestamp) || on.Updated() {
		t.Fatalf("insert: %+v %v", on, err)
	}
	off, _ := s.InsertCommand(ctx, cmd("dev1", "reboot"))
	s.InsertCommand(ctx, cmd("dev2", "switch"))
	if !off.Timestamp.After(on.Timestamp) || off.ID <= on.ID {
		t.Fatalf("ids and timestamps must rise: %+v then %+v", on, off)
	}
	got, err := s.GetCommand(ctx, "dev1", on.ID)
	if err != nil || got.Name != "switch" || string(got.Parameters) != `{"on":true}` || got.UserID != 7 {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.GetCommand(ctx, "dev2", on.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another device's command: %v", err)
	}
	if l, _ := s.ListCommands(ctx, CommandFilter{Devices: []string{"dev1"}, Names: []string{"reboot"}}); len(l) != 1 || l[0].ID != off.ID {
		t.Fatalf("list by name: %+v", l)
	}

	// A poll for new commands from a cursor returns what came after it, oldest first.
	if l, err := s.PollCommands(ctx, CommandFilter{Devices: []string{"dev1"}, After: on.Timestamp}); err != nil || len(l) != 1 || l[0].ID != off.ID {
		t.Fatalf("poll after the first: %+v %v", l, err)
	}

	// Answered.
	done := "done"
	upd, err := s.UpdateCommand(ctx, "dev1", on.ID, CommandUpdate{Status: &done, Result: json.RawMessage(`{"ok":1}`)})
	if err != nil || upd.Status != "done" || string(upd.Result) != `{"ok":1}` || !upd.Updated() || !upd.LastUpdated.After(off.Timestamp) {
		t.Fatalf("update: %+v %v", upd, err)
	}
	if _, err := s.UpdateCommand(ctx, "dev2", on.ID, CommandUpdate{Status: &done}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("updating another device's command: %v", err)
	}
	if c, ok, err := s.PollCommandUpdate(ctx, "dev1", on.ID); err != nil || !ok || c.Status != "done" {
		t.Fatalf("poll for an answered command: %+v %v %v", c, ok, err)
	}
	answered, err := s.PollCommands(ctx, CommandFilter{Devices: []string{"dev1"}, Updated: true, After: on.Timestamp})
	if err != nil || len(answered) != 1 || answered[0].ID != on.ID {
		t.Fatalf("poll for answers: %+v %v", answered, err)
	}
	if l, _ := s.ListCommands(ctx, CommandFilter{Status: "done"}); len(l) != 1 || l[0].ID != on.ID {
		t.Fatalf("list by status: %+v", l)
	}

	// Not answered within the wait: the command as it is.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if c, ok, err := s.PollCommandUpdate(wctx, "dev1", off.ID); err != nil || ok || c.ID != off.ID {
		t.Fatalf("poll for an unanswered command: %+v %v %v", c, ok, err)
	}
}

// A poll waiting for a device's commands wakes for a command to that device, not for
// one to another device; a poll for an answer wakes for the answer.
func TestCommandPollsWake(t *testing.T) {
	s := open(t, t.TempDir(), Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan []Command, 1)
	go func() {
		got, _ := s.PollCommands(ctx, CommandFilter{Devices: []string{"dev1"}})
		res <- got
	}()
	for {
		s.InsertCommand(ctx, cmd("dev2", "other"))
		c, err := s.InsertCommand(ctx, cmd("dev1", "mine"))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-res:
			if len(got) == 0 || got[0].Device != "dev1" || got[0].ID > c.ID {
				t.Fatalf("woke with %+v", got)
			}
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}

	c, _ := s.InsertCommand(ctx, cmd("dev1", "answer me"))
	answered := make(chan Command, 1)
	go func() {
		got, _, _ := s.PollCommandUpdate(ctx, "dev1", c.ID)
		answered <- got
	}()
	ok := "ok"
	if _, err := s.UpdateCommand(ctx, "dev1", c.ID, CommandUpdate{Status: &ok}); err != nil {
		t.Fatal(err)
	}
	if got := <-answered; got.Status != "ok" {
		t.Fatalf("answer poll returned %+v", got)
	}
}

// A device holds at most MaxCommands: a new one replaces the oldest answered one, and
// is refused while every one is unanswered. Expired commands are not polled, answered
// or not.
func TestCommandLimitsAndLifetime(t *testing.T) {
	s := open(t, t.TempDir(), Config{MaxCommands: 2})
	ctx := context.Background()
	first, _ := s.InsertCommand(ctx, cmd("dev1", "a"))
	s.InsertCommand(ctx, cmd("dev1", "b"))
	if _, err := s.InsertCommand(ctx, cmd("dev1", "c")); !errors.Is(err, ErrTooManyCommands) {
		t.Fatalf("a third unanswered command: %v", err)
	}
	if _, err := s.InsertCommand(ctx, cmd("dev2", "c")); err != nil {
		t.Fatalf("another device is not limited by dev1's: %v", err)
	}
	done := "done"
	s.UpdateCommand(ctx, "dev1", first.ID, CommandUpdate{Status: &done})
	if _, err := s.InsertCommand(ctx, cmd("dev1", "c")); err != nil {
		t.Fatalf("after an answer: %v", err)
	}
	l, _ := s.ListCommands(ctx, CommandFilter{Devices: []string{"dev1"}})
	if len(l) != 2 || l[0].Name != "b" || l[1].Name != "c" {
		t.Fatalf("dev1 holds %+v; want b, c (the answered one replaced)", l)
	}

	short := cmd("dev3", "stale")
	short.Lifetime = 60
	c, _ := s.InsertCommand(ctx, short)
	before := c.Timestamp.Add(-time.Microsecond)
	if l, _ := s.PollCommands(ctx, CommandFilter{Devices: []string{"dev3"}, After: before, Live: true}); len(l) != 1 {
		t.Fatalf("a live command not polled: %+v", l)
	}
	// Stored two minutes ago: past its lifetime.
	if _, err := s.db.ExecContext(ctx, `UPDATE commands SET ts = ts - 120000000 WHERE id = ?`, c.ID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if l, _ := s.PollCommands(wctx, CommandFilter{Devices: []string{"dev3"}, After: before.Add(-3 * time.Minute), Live: true}); len(l) != 0 {
		t.Fatalf("an expired command polled: %+v", l)
	}
	if l, _ := s.ListCommands(ctx, CommandFilter{Devices: []string{"dev3"}}); len(l) != 1 {
		t.Fatalf("an expired command is still listed: %+v", l)
	}
}

// Commands go with their device, and age out with the notifications.
func TestCommandsRemovedAndPruned(t *testing.T) {
	s := open(t, t.TempDir(), Config{Retention: time.Hour})
	ctx := context.Background()
	s.InsertCommand(ctx, cmd("dev1", "a"))
	s.InsertCommand(ctx, cmd("dev2", "a"))
	if err := s.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListCommands(ctx, CommandFilter{}); len(l) != 1 || l[0].Device != "dev2" {
		t.Fatalf("after removing dev1: %+v", l)
	}
	if _, err := s.Prune(ctx, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListCommands(ctx, CommandFilter{}); len(l) != 0 {
		t.Fatalf("past retention: %+v", l)
	}
}

// On PostgreSQL a command sent through one hub wakes a device's poll at another, and
// the answer given at that hub wakes the sender's poll at the first.
func TestCommandsAcrossHubs(t *testing.T) {
	pgOnly(t)
	dir := t.TempDir()
	a, b := open(t, dir, Config{}), open(t, dir, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan []Command, 1)
	go func() {
		got, _ := b.PollCommands(ctx, CommandFilter{Devices: []string{"dev1"}, Live: true})
		res <- got
	}()
	var sent Command
	for {
		var err error
		if sent, err = a.InsertCommand(ctx, cmd("dev1", "switch")); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-res:
			if len(got) == 0 || got[0].Name != "switch" {
				t.Fatalf("poll at the other hub: %+v", got)
			}
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	answered := make(chan Command, 1)
	go func() {
		got, _, _ := a.PollCommandUpdate(ctx, "dev1", sent.ID)
		answered <- got
	}()
	done := "done"
	if _, err := b.UpdateCommand(ctx, "dev1", sent.ID, CommandUpdate{Status: &done}); err != nil {
		t.Fatal(err)
	}
	if got := <-answered; got.Status != "done" {
		t.Fatalf("answer seen at the sender's hub: %+v", got)
	}
}
