package control_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// One of every change, each field set: what the admin socket must carry unchanged.
func samples() []control.Change {
	exp := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	g := registry.Grant{Kind: registry.PrincipalGroup, Name: "ops", XID: 1001, Target: "@sensors", Alias: "http"}
	return []control.Change{
		control.AddDevice{Name: "dev1", Profile: "camera", Key: "ssh-ed25519 AAAA dev1", Groups: []string{"a", "b"}},
		control.RevokeDevice{Device: "dev1", Reason: "stolen"},
		control.ReinstateDevice{Device: "dev1"},
		control.RemoveDevice{Device: "dev1"},
		control.PutProfile{Spec: "name: camera\nreverse: {http: 0}\n", Restart: true},
		control.AddKey{Device: "dev1", Key: "ssh-ed25519 AAAA new"},
		control.RevokeKey{Device: "dev1", Fingerprint: "SHA256:abc"},
		control.SetGroups{Device: "dev1", Groups: []string{"floor-2"}},
		control.AddGroupInfo{Kind: "network", Name: "plant-a", Description: "the first plant"},
		control.RemoveGroupInfo{Group: "network:plant-a"},
		control.AddJoinToken{Hash: "h", Profile: "default", Names: "sensor-*", Uses: 5, Expires: time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC), Approve: "manual"},
		control.RevokeJoinToken{ID: 3},
		control.ApproveDevice{Device: "sensor-1"},
		control.JoinDevice{Hash: "h", Name: "sensor-1", Key: "ssh-ed25519 AAAA", Remote: "127.0.0.1:4"},
		control.TrustSSHCA{Name: "acme", Key: "ssh-ed25519 AAAA", Names: "sensor-*", Profile: "sensor", Approve: "manual"},
		control.UntrustSSHCA{Name: "acme"},
		control.RecordSSHCert{CA: "SHA256:x", Serial: 1<<63 + 5, Device: "d", KeyID: "d@hub", Key: "ssh-ed25519 AAAA", ValidBefore: time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)},
		control.RevokeSSHCert{CA: "SHA256:x", Serial: 9, Key: "ssh-ed25519 AAAA", Device: "d", Reason: "lost"},
		control.EnrolByCertificate{CA: "SHA256:x", Name: "sensor-2", Key: "ssh-ed25519 AAAA", KeyID: "k", Serial: 3, Remote: "127.0.0.1:5"},
		control.SetDeviceSecret{Device: "dev1", Hash: "h"},
		control.SetDeviceCert{Device: "dev1", Serial: "12345", NotAfter: exp},
		control.SetSOAPKey{Device: "dev1", KeyID: "k1", Secret: []byte{0, 1, 2, 255}},
		control.AddGrant{Grant: g},
		control.AddGrant{Grant: g, AllowUnknown: true},
		control.RemoveGrant{Grant: g},
		control.AddAccount{Name: "alice", PasswordHash: "ph"},
		control.SetPassword{Account: "alice", PasswordHash: "ph2"},
		control.RemoveAccount{Account: "alice"},
		control.EndLoginSessions{Account: "alice"},
		control.AddToken{Account: "alice", Label: "ci", Hash: "th", Expires: &exp},
		control.RevokeToken{Account: "alice", ID: 7},
	}
}

// Every change crosses the admin socket's wire form unchanged, and every op the decoder
// knows has a sample here (a new change cannot be left out of this test).
func TestWireRoundTrip(t *testing.T) {
	var ops []string
	for _, ch := range samples() {
		ops = append(ops, ch.Op())
		env, err := control.Wrap(ch)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		var back control.Envelope
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		got, err := control.Unwrap(back)
		if err != nil {
			t.Fatalf("%s: %v", ch.Op(), err)
		}
		if !reflect.DeepEqual(got, ch) {
			t.Fatalf("%s: got %+v, want %+v", ch.Op(), got, ch)
		}
	}
	sort.Strings(ops)
	ops = slices.Compact(ops) // a change may have several samples
	if !reflect.DeepEqual(ops, control.Ops()) {
		t.Fatalf("samples cover %v, the decoder knows %v", ops, control.Ops())
	}
}

// Malformed envelopes get a clear error naming the problem.
func TestWireRefusals(t *testing.T) {
	for _, tc := range []struct {
		env  control.Envelope
		want string
	}{
		{control.Envelope{Op: "device.format", Change: json.RawMessage(`{}`)}, "unknown change"},
		{control.Envelope{Op: "device.revoke"}, "without its fields"},
		{control.Envelope{Op: "device.revoke", Change: json.RawMessage(`{"device":"d","color":"red"}`)}, "unknown field"},
		{control.Envelope{Op: "device.revoke", Change: json.RawMessage(`{"device":"d"} {}`)}, "trailing data"},
		{control.Envelope{Op: "device.revoke", Change: json.RawMessage(`{"device":42}`)}, "device.revoke"},
		{control.Envelope{Op: "device.revoke", Change: json.RawMessage(`{}`)}, "needs a device"},
		{control.Envelope{Op: "profile.put", Change: json.RawMessage(`{"spec":"name: x\nreverse: {http: 0}\ncolour: red\n"}`)}, "colour"},
	} {
		_, err := control.Unwrap(tc.env)
		if err == nil || !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v", tc.env.Op, tc.env.Change, err)
		}
	}
}

// The admin socket's input (root, the hub's user and the admin group may write it):
// whatever arrives is refused with an error or decodes to a change that survives another
// round trip unchanged.
func FuzzUnwrap(f *testing.F) {
	for _, ch := range samples() {
		env, _ := control.Wrap(ch)
		f.Add(env.Op, []byte(env.Change))
	}
	f.Fuzz(func(t *testing.T, op string, raw []byte) {
		ch, err := control.Unwrap(control.Envelope{Op: op, Change: raw})
		if err != nil {
			return
		}
		env, err := control.Wrap(ch)
		if err != nil {
			t.Fatal(err)
		}
		again, err := control.Unwrap(env)
		if err != nil {
			t.Fatalf("%+v does not decode again: %v", ch, err)
		}
		if env2, _ := control.Wrap(again); env2.Op != env.Op || string(env2.Change) != string(env.Change) {
			t.Fatalf("round trip: %s -> %s", env.Change, env2.Change)
		}
	})
}
