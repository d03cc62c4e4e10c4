package admin

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type fakeHub struct{ kicked []string }

// The hub side is a plain recorder: the socket protocol and credential check are real.
func (f *fakeHub) KickKey(device, key, _ string) int {
	f.kicked = append(f.kicked, device+key)
	return 1
}
func (f *fakeHub) OnlineDevices() map[string]bool { return map[string]bool{"dev1": true} }
func (f *fakeHub) ReloadAccess() error            { return nil }
func (f *fakeHub) Revoke(device, _ string) (int, error) {
	f.kicked = append(f.kicked, device)
	return 1, nil
}
func (f *fakeHub) RegistryState() (map[string]string, string) { return nil, "" }
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
	rep, err := Call(path, Request{Op: OpKick, Device: "dev9", Reason: "test"})
	if err != nil || rep.Closed != 1 || len(h.kicked) != 1 || h.kicked[0] != "dev9" {
		t.Fatalf("kick: %+v %v %v", rep, err, h.kicked)
	}
	if rep, err := Call(path, Request{Op: OpStatus}); err != nil || !rep.Online["dev1"] || rep.Hub == nil || rep.Hub.PID != 1 {
		t.Fatalf("status: %+v %v", rep, err)
	}
	if _, err := Call(path, Request{Op: "format-disk"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("unknown op: %v", err)
	}
	if _, err := Call(path, Request{Op: OpKick}); err == nil {
		t.Fatal("kick without a device accepted")
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
