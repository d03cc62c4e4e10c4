package sshd

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// nextRequest is the next global request the hub sends, or a failure after a minute
// (a guard against a hang, not a timing assertion).
func nextRequest(t *testing.T, reqs <-chan *ssh.Request) *ssh.Request {
	t.Helper()
	select {
	case r := <-reqs:
		return r
	case <-time.After(time.Minute):
		t.Fatal("no request from the hub")
		return nil
	}
}

// A rotation reaches a live session: the hub announces its signing and next keys
// once, proves the next key over this session, refuses to prove a stranger's, and
// records that the device learned the key.
func TestHostKeyRotationAnnouncedAndProven(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), nil)
	conn, _, reqs := f.dial(t)
	next := signer(t)
	f.srv.SetHostKeys(&hostkey.Set{Signing: []ssh.Signer{f.hostSigner}, Next: []ssh.Signer{next}})

	r := nextRequest(t, reqs)
	if r.Type != hostkey.AnnounceRequest || r.WantReply {
		t.Fatalf("want an announcement without reply, got %q (want reply %v)", r.Type, r.WantReply)
	}
	keys, err := hostkey.ParseKeys(r.Payload)
	if err != nil || len(keys) != 2 || !sameKey(keys[0], f.host) || !sameKey(keys[1], next.PublicKey()) {
		t.Fatalf("announced %v %v", keys, err)
	}
	ok, reply, err := conn.SendRequest(hostkey.ProveRequest, true, hostkey.MarshalKeys(keys[1:]))
	if err != nil || !ok {
		t.Fatalf("prove: %v %v", ok, err)
	}
	if err := hostkey.VerifyProofs(conn.SessionID(), keys[1:], reply); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := conn.SendRequest(hostkey.ProveRequest, true, hostkey.MarshalKeys([]ssh.PublicKey{signer(t).PublicKey()})); ok {
		t.Fatal("the hub proved a key that is not its own")
	}
	// Told once per connection: OpenSSH clients drop a session that gets a second.
	f.srv.SetHostKeys(&hostkey.Set{Signing: []ssh.Signer{f.hostSigner}, Next: []ssh.Signer{next, signer(t)}})
	if ok, _, _ := conn.SendRequest(hostkey.ProveRequest, true, hostkey.MarshalKeys(keys[1:])); ok {
		t.Fatal("a third proof in one session was answered")
	}
	if ok, _, err := conn.SendRequest("keepalive@openssh.com", true, nil); err != nil || ok {
		t.Fatalf("the session must live on after refused proofs: %v %v", ok, err)
	}
	select {
	case r := <-reqs:
		t.Fatalf("a second announcement on one connection: %q", r.Type)
	default:
	}

	f.srv.Close() // waits for the registry writes
	notes, err := f.reg.DeviceHostKeyNotes(context.Background(), "dev1")
	if err != nil || notes[ssh.FingerprintSHA256(next.PublicKey())] != registry.HostKeyProven {
		t.Fatalf("the proof must be recorded: %v %v", notes, err)
	}
	evs, _ := f.reg.Events(context.Background(), registry.EventFilter{Device: "dev1", Kind: registry.EventViolation})
	if len(evs) != 1 {
		t.Fatalf("a proof asked more than twice is one violation: %+v", evs)
	}
}

// A new session is told when there is something to learn: a retired key it was not
// told is gone.
func TestHostKeyRetirementAnnouncedOnce(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), nil)
	old := signer(t).PublicKey()
	f.srv.SetHostKeys(&hostkey.Set{Signing: []ssh.Signer{f.hostSigner}, Retired: []ssh.PublicKey{old}})
	_, _, reqs := f.dial(t)
	r := nextRequest(t, reqs)
	keys, err := hostkey.ParseKeys(r.Payload)
	if r.Type != hostkey.AnnounceRequest || err != nil || len(keys) != 1 || !sameKey(keys[0], f.host) {
		t.Fatalf("announced %q %v %v", r.Type, keys, err)
	}
	// Then, for iotsafe agents, what was retired (OpenSSH drops whatever is left out).
	r = nextRequest(t, reqs)
	keys, err = hostkey.ParseKeys(r.Payload)
	if r.Type != hostkey.RetiredRequest || r.WantReply || err != nil || len(keys) != 1 || !sameKey(keys[0], old) {
		t.Fatalf("retired %q %v %v", r.Type, keys, err)
	}
	f.srv.Close()
	notes, err := f.reg.DeviceHostKeyNotes(context.Background(), "dev1")
	if err != nil || notes[ssh.FingerprintSHA256(old)] != registry.HostKeyWithdrawn {
		t.Fatalf("the withdrawal must be recorded: %v %v", notes, err)
	}
}

func sameKey(a, b ssh.PublicKey) bool { return string(a.Marshal()) == string(b.Marshal()) }

// An iotsafe client is told each new set of keys on one connection (OpenSSH clients
// once): a second rotation reaches a live agent, and its proofs are allowed again.
func TestIotsafeClientsAreToldEachNewSet(t *testing.T) {
	f := newFixture(t, testProfile("name: p\nreverse: {http: 0}\n"), nil)
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, reqs, err := ssh.NewClientConn(c, f.addr, &ssh.ClientConfig{User: "dev1", Auth: []ssh.AuthMethod{ssh.PublicKeys(f.device)},
		HostKeyCallback: ssh.FixedHostKey(f.host), ClientVersion: "SSH-2.0-iotsafe-agent"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, next := range []ssh.Signer{signer(t), signer(t)} {
		f.srv.SetHostKeys(&hostkey.Set{Signing: []ssh.Signer{f.hostSigner}, Next: []ssh.Signer{next}})
		r := nextRequest(t, reqs)
		keys, err := hostkey.ParseKeys(r.Payload)
		if r.Type != hostkey.AnnounceRequest || err != nil || len(keys) != 2 || !sameKey(keys[1], next.PublicKey()) {
			t.Fatalf("announced %q %v %v", r.Type, keys, err)
		}
		for range proofsPerAnnouncement {
			if ok, _, err := conn.SendRequest(hostkey.ProveRequest, true, hostkey.MarshalKeys(keys[1:])); err != nil || !ok {
				t.Fatalf("prove: %v %v", ok, err)
			}
		}
	}
	// The same set again is not sent again.
	f.srv.SetHostKeys(f.srv.hostKeys.Load())
	if ok, _, _ := conn.SendRequest(hostkey.ProveRequest, true, hostkey.MarshalKeys([]ssh.PublicKey{f.host})); ok {
		t.Fatal("a fifth proof for two announcements was answered")
	}
}
