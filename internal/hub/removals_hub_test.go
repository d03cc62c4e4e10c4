package hub

import (
	"context"
	"log/slog"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sshtest"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// A device removed while no hub ran (the CLI's offline mode writes the registry alone)
// loses its notifications at the next start, and a device enrolled again under its
// name keeps what it stores after, across later starts too.
func TestRemovalWhileStoppedReachesTheStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const pool = "127.86.0.0/24"
	start := func() *Hub {
		t.Helper()
		cfg, err := ParseConfig([]byte("access: {kernel: off}\npool: {cidr: " + pool + "}\nssh: {listen: 127.0.0.1:0}\nrest: {listen: 127.0.0.1:0}\n"))
		if err != nil {
			t.Fatal(err)
		}
		h, err := Start(ctx, cfg, Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	enroll := func(ctl *control.Control, name string) {
		t.Helper()
		line := string(ssh.MarshalAuthorizedKey(sshtest.Signer(t).PublicKey()))
		if _, err := ctl.Apply(ctx, control.AddDevice{Name: name, Profile: "default", Key: line}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(h *Hub, device string) []string {
		t.Helper()
		f := telemetry.Filter{}
		if device != "" {
			f.Devices = []string{device}
		}
		got, err := h.Store().List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range got {
			out = append(out, n.Device+"/"+n.Name)
		}
		return out
	}

	h := start()
	enroll(h.Control(), "dev1")
	enroll(h.Control(), "dev2")
	if _, err := h.Store().Append(ctx, telemetry.Notification{Device: "dev1", Name: "old"}, telemetry.Notification{Device: "dev2", Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	h.Close()

	reg, err := registry.Open(ctx, dir, sockets.Config{CIDR: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.New(reg, nil).Apply(ctx, control.RemoveDevice{Device: "dev1"}); err != nil {
		t.Fatal(err)
	}
	enroll(control.New(reg, nil), "dev1") // someone else's device, the same name
	reg.Close()

	h = start()
	if got := names(h, ""); len(got) != 1 || got[0] != "dev2/kept" {
		t.Fatalf("after the start: %v; want only dev2/kept", got)
	}
	if _, err := h.Store().Append(ctx, telemetry.Notification{Device: "dev1", Name: "new"}); err != nil {
		t.Fatal(err)
	}
	h.Close()

	h = start()
	defer h.Close()
	if got := names(h, "dev1"); len(got) != 1 || got[0] != "dev1/new" {
		t.Fatalf("the new dev1 after another start: %v; want dev1/new", got)
	}
}
