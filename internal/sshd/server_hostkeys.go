package sshd

import (
	"context"
	"errors"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// HostKeyNotes is the store's record of what each device was told of the hub's host
// keys during a rotation (registry.NoteHostKeys). With a store that has none, the hub
// announces at every session of a rotation and records nothing.
type HostKeyNotes interface {
	NoteHostKeys(ctx context.Context, device, state string, fingerprints []string) error
	DeviceHostKeyNotes(ctx context.Context, device string) (map[string]string, error)
}

// errNoRotation: the server was given no host keys to prove (SetHostKeys).
var errNoRotation = errors.New("sshd: no host key set to prove from")

// proofsPerAnnouncement is how many host key proofs a session may ask for each
// announcement it was sent: OpenSSH asks once per announcement, and each proof costs the
// hub a signature per key.
const proofsPerAnnouncement = 2

// iotsafeClient is the version prefix of iotsafe's own clients (agent, gateway uplink),
// which take a new announcement whenever the hub's keys change.
const iotsafeClient = "SSH-2.0-iotsafe-"

// SetHostKeys gives the server its host keys' rotation state (internal/hostkey). The
// keys that sign handshakes stay those given to New. When the set has something for
// devices to learn, live sessions are told now, in the background: those not told yet,
// and iotsafe clients told an older set (OpenSSH clients take one announcement per
// connection, and learn a newer set when they reconnect).
func (s *Server) SetHostKeys(set *hostkey.Set) {
	s.hostKeys.Store(set)
	if set == nil || !set.Rotating() {
		return
	}
	var live []*session
	s.mu.Lock()
	for _, ds := range s.devices {
		for _, ss := range ds.sessions {
			if ss.conn != nil && ss.gw == nil {
				live = append(live, ss)
			}
		}
	}
	s.mu.Unlock()
	if len(live) == 0 {
		return
	}
	s.afterSession(func() {
		for _, ss := range live {
			select {
			case <-ss.done:
			case <-s.shutdown:
				return
			default:
				ss.announceHostKeys(set)
			}
		}
	})
}

// announceHostKeys sends the device the hub's signing and next host keys
// (hostkeys-00@openssh.com) when it has something to learn: a next key it has not
// proven yet, or a retired key it was not told is gone. An OpenSSH client is sent one
// announcement per connection; an iotsafe client one per set of keys.
func (ss *session) announceHostKeys(set *hostkey.Set) {
	if set == nil || !set.Rotating() {
		return
	}
	ss.announceMu.Lock()
	defer ss.announceMu.Unlock()
	id := setID(set)
	if ss.announced == id || ss.announced != "" && !strings.HasPrefix(string(ss.conn.ClientVersion()), iotsafeClient) {
		return
	}
	s := ss.srv
	notes := map[string]string{}
	hn, recorded := s.store.(HostKeyNotes)
	if recorded {
		ctx, cancel := context.WithTimeout(s.life, s.cfg.HandshakeTimeout)
		got, err := hn.DeviceHostKeyNotes(ctx, ss.device.Name)
		cancel()
		if err != nil {
			ss.log.Warn("reading what the device was told of host keys failed; announcing them again", "err", err)
		} else {
			notes = got
		}
	}
	var next, withdrawn []string
	for _, k := range set.NextKeys() {
		if fp := ssh.FingerprintSHA256(k); notes[fp] != registry.HostKeyProven {
			next = append(next, fp)
		}
	}
	for _, k := range set.Retired {
		if fp := ssh.FingerprintSHA256(k); notes[fp] != registry.HostKeyWithdrawn {
			withdrawn = append(withdrawn, fp)
		}
	}
	if len(next) == 0 && len(withdrawn) == 0 {
		return
	}
	ss.announced = id
	ss.proofsAllowed.Add(proofsPerAnnouncement)
	if _, _, err := ss.conn.SendRequest(hostkey.AnnounceRequest, false, hostkey.MarshalKeys(set.Announced())); err != nil {
		return // the session ended
	}
	s.metrics.HostKeyAnnounced()
	if len(set.Retired) > 0 {
		if _, _, err := ss.conn.SendRequest(hostkey.RetiredRequest, false, hostkey.MarshalKeys(set.Retired)); err != nil {
			return
		}
	}
	if recorded {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
		defer cancel()
		err := hn.NoteHostKeys(ctx, ss.device.Name, registry.HostKeyAnnounced, next)
		if err == nil {
			err = hn.NoteHostKeys(ctx, ss.device.Name, registry.HostKeyWithdrawn, withdrawn)
		}
		if err != nil {
			ss.log.Warn("recording the host key announcement failed", "err", err)
		}
	}
	// After the write: 'iotsafe hostkey list' counts the device from here on.
	ss.log.Info("host keys announced", "next", next, "withdrawn", withdrawn)
}

// proveHostKeys answers a device's hostkeys-prove-00@openssh.com: a signature by each
// key it asks about, which must be the hub's signing or next keys. A device that proves
// a next key is about to trust it; that is recorded for 'iotsafe hostkey list'.
func (ss *session) proveHostKeys(req *ssh.Request) {
	s := ss.srv
	set := s.hostKeys.Load()
	if ss.proofs.Add(1) > ss.proofsAllowed.Load() {
		s.metrics.HostKeyProof(false)
		req.Reply(false, nil)
		ss.refused("host key proof asked without an announcement, or more than twice for one")
		return
	}
	keys, err := hostkey.ParseKeys(req.Payload)
	var reply []byte
	if err == nil && set == nil {
		err = errNoRotation
	}
	if err == nil {
		reply, err = set.Prove(ss.conn.SessionID(), keys)
	}
	if err != nil {
		ss.log.Warn("host key proof refused", "err", err)
		s.metrics.HostKeyProof(false)
		req.Reply(false, nil)
		ss.refused("") // no OpenSSH client asks this: it counts toward the refusal budget
		return
	}
	s.metrics.HostKeyProof(true)
	req.Reply(true, reply)
	var learned []string
	for _, k := range keys {
		if set.IsNext(k) {
			learned = append(learned, ssh.FingerprintSHA256(k))
		}
	}
	if len(learned) == 0 {
		return
	}
	hn, ok := s.store.(HostKeyNotes)
	if !ok {
		ss.log.Info("device learns the hub's next host key", "next", learned)
		return
	}
	name, log := ss.device.Name, ss.log
	s.afterSession(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
		defer cancel()
		if err := hn.NoteHostKeys(ctx, name, registry.HostKeyProven, learned); err != nil {
			log.Warn("recording that the device learned the next host key failed", "next", learned, "err", err)
			return
		}
		// After the write: 'iotsafe hostkey list' counts the device from here on.
		log.Info("device learns the hub's next host key", "next", learned)
	})
}

// setID names a set of announced and retired keys, to tell a new set from one sent.
func setID(set *hostkey.Set) string {
	var b strings.Builder
	for _, k := range set.Announced() {
		b.WriteString(ssh.FingerprintSHA256(k) + " ")
	}
	b.WriteString("-")
	for _, k := range set.Retired {
		b.WriteString(" " + ssh.FingerprintSHA256(k))
	}
	return b.String()
}
