package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
)

type fakeHub struct{ applied []control.Change }

// The hub side is a plain recorder: the socket protocol, the change's wire form and the
// credential check are real (internal/control's tests apply changes to a registry).
func (f *fakeHub) Apply(_ context.Context, ch control.Change) (control.Outcome, error) {
	f.applied = append(f.applied, ch)
	return control.Outcome{Closed: 1}, nil
}
func (f *fakeHub) OnlineDevices() map[string]bool             { return map[string]bool{"dev1": true} }
func (f *fakeHub) RegistryState() (map[string]string, string) { return nil, "" }
func (f *fakeHub) ReloadHostKeys() error                      { return nil }

func (f *fakeHub) MQTTClients(string) ([]MQTTClient, error) {
	return nil, errors.New("the broker is off")
}
func (f *fakeHub) Info() HubInfo { return HubInfo{PID: 1} }

func TestAdminSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	h := &fakeHub{}
	s, err := Listen(path, "", h, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
	if _, err := Call(path, Request{Op: OpPing}); err != nil {
		t.Fatal(err)
	}
	env, err := control.Wrap(control.RevokeDevice{Device: "dev9", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Call(path, Request{Op: OpChange, Change: &env})
	want := control.RevokeDevice{Device: "dev9", Reason: "test"}
	if err != nil || rep.Outcome == nil || rep.Outcome.Closed != 1 || len(h.applied) != 1 || h.applied[0] != want {
		t.Fatalf("change: %+v %v %v", rep, err, h.applied)
	}
	if rep, err := Call(path, Request{Op: OpStatus}); err != nil || !rep.Online["dev1"] || rep.Hub == nil || rep.Hub.PID != 1 {
		t.Fatalf("status: %+v %v", rep, err)
	}
	if _, err := Call(path, Request{Op: "format-disk"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("unknown op: %v", err)
	}
	// A change without its fields, of an unknown kind, or missing what it needs is
	// refused with a clear error and never reaches the hub.
	for _, bad := range []*control.Envelope{nil, {Op: "device.format"}, {Op: "device.revoke", Change: json.RawMessage(`{}`)}} {
		if _, err := Call(path, Request{Op: OpChange, Change: bad}); err == nil {
			t.Fatalf("change %+v accepted", bad)
		}
	}
	if len(h.applied) != 1 {
		t.Fatalf("a refused change reached the hub: %v", h.applied)
	}
	// Malformed input gets a clear answer and leaves the server serving.
	c, _ := net.Dial("unix", path)
	c.Write([]byte("{not json\n"))
	var r Reply
	json.NewDecoder(c).Decode(&r)
	c.Close()
	if r.OK || !strings.Contains(r.Error, "malformed request") {
		t.Fatalf("malformed: %+v", r)
	}
	if _, err := Call(path, Request{Op: OpPing}); err != nil {
		t.Fatal("server died after malformed input")
	}
	// A second hub on the same data folder is refused.
	if _, err := Listen(path, "", h, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second hub: %v", err)
	}
}

func TestCallWithoutHub(t *testing.T) {
	if _, err := Call(filepath.Join(t.TempDir(), SocketName), Request{Op: OpPing}); err == nil || !strings.Contains(err.Error(), "hub not running") {
		t.Fatalf("%v", err)
	}
}

// The admin group (a uid other than root's and the hub's) may revoke a device, and no
// other change: it could not write the registry before changes came over the socket.
func TestAdminGroupMayOnlyRevoke(t *testing.T) {
	s := &Server{hubUID: 999}
	member := &unix.Ucred{Uid: 1234, Gid: 50}
	if err := s.mayChange(member, control.RevokeDevice{Device: "dev1"}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	for _, ch := range []control.Change{
		control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalUser, Name: "eve", Target: "dev1", Alias: "*"}},
		control.AddAccount{Name: "eve"},
		control.RemoveDevice{Device: "dev1"},
	} {
		if err := s.mayChange(member, ch); err == nil || !strings.Contains(err.Error(), "may not "+ch.Op()) {
			t.Fatalf("%s: %v", ch.Op(), err)
		}
	}
	for _, owner := range []*unix.Ucred{{Uid: 0}, {Uid: 999}} {
		if err := s.mayChange(owner, control.AddAccount{Name: "ops"}); err != nil {
			t.Fatalf("uid %d: %v", owner.Uid, err)
		}
	}
}
