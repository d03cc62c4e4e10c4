package registry

import (
	"context"
	"testing"
)

// What devices were told of host keys: a proof is never undone by a later
// announcement, and a removed device's notes go with it.
func TestHostKeyNotes(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"dev1", "dev2"} {
		_, err := r.AddDevice(ctx, d, "default", newKey(t))
		must(err)
	}
	must(r.NoteHostKeys(ctx, "dev1", HostKeyAnnounced, []string{"SHA256:cur", "SHA256:next"}))
	must(r.NoteHostKeys(ctx, "dev1", HostKeyProven, []string{"SHA256:next"}))
	must(r.NoteHostKeys(ctx, "dev1", HostKeyAnnounced, []string{"SHA256:cur", "SHA256:next"}))
	must(r.NoteHostKeys(ctx, "dev2", HostKeyAnnounced, []string{"SHA256:next"}))
	must(r.NoteHostKeys(ctx, "dev2", HostKeyWithdrawn, []string{"SHA256:old"}))
	got, err := r.DeviceHostKeyNotes(ctx, "dev1")
	must(err)
	if got["SHA256:next"] != HostKeyProven || got["SHA256:cur"] != HostKeyAnnounced || len(got) != 2 {
		t.Fatalf("dev1's notes: %v", got)
	}
	notes, err := r.HostKeyNotes(ctx, []string{"SHA256:next", "SHA256:old"})
	must(err)
	if len(notes) != 3 || notes[0].Device != "dev1" || notes[0].State != HostKeyProven || notes[0].At.IsZero() ||
		notes[1].Device != "dev2" || notes[1].Fingerprint != "SHA256:next" || notes[2].State != HostKeyWithdrawn {
		t.Fatalf("notes: %+v", notes)
	}
	must(r.RemoveDevice(ctx, "dev2"))
	if notes, _ := r.HostKeyNotes(ctx, []string{"SHA256:next", "SHA256:old"}); len(notes) != 1 {
		t.Fatalf("a removed device's notes must go with it: %+v", notes)
	}
}
