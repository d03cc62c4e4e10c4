package agent

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/iotsafe/iotsafe/internal/atomicfile"
	"github.com/iotsafe/iotsafe/internal/hostkey"
)

// HostKeyLearner takes what a hub announces of its host keys during a rotation
// (hostkeys-00@openssh.com, internal/hostkey), on a session whose key it trusted.
type HostKeyLearner interface {
	// ToProve picks the announced keys the hub must prove it holds.
	ToProve(host string, remote net.Addr, announced []ssh.PublicKey) []ssh.PublicKey
	// Proven is told every announced key and those the hub proved.
	Proven(log *slog.Logger, host string, remote net.Addr, announced, proven []ssh.PublicKey) error
	// Retired is told the keys the hub says it retired (hostkeys-retired@iotsafe.dev).
	Retired(log *slog.Logger, host string, retired []ssh.PublicKey) error
}

// Pins trusts exactly the hub keys given by fingerprint.
type Pins struct{ pinned []string }

// PinFingerprint trusts exactly the hub keys given, as "SHA256:..." (as printed by the
// hub at start and by ssh-keygen -lf); several, comma-separated, for an agent with
// several hubs of one registry (any of them may answer at any of their addresses: pin
// per address with a known_hosts file instead), or during a host key rotation.
func PinFingerprint(fps string) (*Pins, error) {
	p := &Pins{}
	for _, fp := range strings.Split(fps, ",") {
		fp = strings.TrimSpace(fp)
		if !strings.HasPrefix(fp, "SHA256:") {
			return nil, fmt.Errorf("agent: --hub-key %q: want a SHA256:... fingerprint", fp)
		}
		p.pinned = append(p.pinned, fp)
	}
	return p, nil
}

// Check is the handshake's host key callback.
func (p *Pins) Check(_ string, _ net.Addr, key ssh.PublicKey) error {
	if !p.has(key) {
		return fmt.Errorf("fingerprint is not the pinned %s", strings.Join(p.pinned, " or "))
	}
	return nil
}

func (p *Pins) has(key ssh.PublicKey) bool {
	have := []byte(ssh.FingerprintSHA256(key))
	ok := 0
	for _, fp := range p.pinned {
		ok |= subtle.ConstantTimeCompare(have, []byte(fp))
	}
	return ok == 1
}

// ToProve asks the hub to prove the announced keys that are pinned: the hub then knows
// this device will take them after a promotion.
func (p *Pins) ToProve(_ string, _ net.Addr, announced []ssh.PublicKey) []ssh.PublicKey {
	var out []ssh.PublicKey
	for _, k := range announced {
		if p.has(k) {
			out = append(out, k)
		}
	}
	return out
}

// Proven says which announced keys the pins leave out: a fingerprint pin cannot change
// by itself.
func (p *Pins) Proven(log *slog.Logger, host string, _ net.Addr, announced, _ []ssh.PublicKey) error {
	for _, k := range announced {
		if !p.has(k) {
			log.Warn("the hub announces a host key that is not pinned: pin it beside the current one (agent --hub-key, gateway upstream.hub_key) before the hub's operator promotes it, or the hub will be refused",
				"hub", host, "key", ssh.FingerprintSHA256(k))
		}
	}
	return nil
}

// Retired says which pinned keys the hub retired: they should leave the pin.
func (p *Pins) Retired(log *slog.Logger, host string, retired []ssh.PublicKey) error {
	for _, k := range retired {
		if p.has(k) {
			log.Warn("the hub retired a pinned host key: remove it from the pin (agent --hub-key, gateway upstream.hub_key)", "hub", host, "key", ssh.FingerprintSHA256(k))
		}
	}
	return nil
}

// KnownHostsFile trusts the keys in an OpenSSH known_hosts file, and keeps it current
// through the hub's host key rotations much as OpenSSH's UpdateHostKeys does: it adds
// the keys the hub proves, but drops only those the hub names as retired.
type KnownHostsFile struct {
	path string
	tofu bool

	mu    sync.Mutex // guards check and the file
	check ssh.HostKeyCallback
}

// KnownHosts trusts the keys in an OpenSSH known_hosts file. With tofu, a hub that has
// no entry yet is trusted once and recorded; a changed key is always refused.
func KnownHosts(path string, tofu bool) (*KnownHostsFile, error) {
	if tofu {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("agent: known hosts: %w", err)
		}
		f.Close()
	}
	k := &KnownHostsFile{path: path, tofu: tofu}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *KnownHostsFile) reload() error {
	check, err := knownhosts.New(k.path)
	if err != nil {
		return fmt.Errorf("agent: known hosts %s: %w", k.path, err)
	}
	k.check = check
	return nil
}

// Check is the handshake's host key callback.
func (k *KnownHostsFile) Check(host string, remote net.Addr, key ssh.PublicKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.check(host, remote, key)
	var ke *knownhosts.KeyError
	if k.tofu && errors.As(err, &ke) && len(ke.Want) == 0 {
		if err := k.appendKeys(host, []ssh.PublicKey{key}); err != nil {
			return err
		}
		return k.reload()
	}
	return err
}

// ToProve asks the hub to prove every announced key, those the file holds too: the
// hub then counts this device as one that will take the next key after a promotion
// (OpenSSH asks only for keys it lacks, so a device given the key another way is not
// counted). A proof costs the hub one signature per key.
func (k *KnownHostsFile) ToProve(_ string, _ net.Addr, announced []ssh.PublicKey) []ssh.PublicKey {
	return announced
}

// Proven adds the proven keys host's entries lack.
func (k *KnownHostsFile) Proven(log *slog.Logger, host string, remote net.Addr, announced, proven []ssh.PublicKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var added []ssh.PublicKey
	for _, key := range proven {
		if k.check(host, remote, key) != nil {
			added = append(added, key)
		}
	}
	if err := k.appendKeys(host, added); err != nil {
		return err
	}
	for _, key := range added {
		log.Info("learned the hub's next host key", "hub", host, "key", ssh.FingerprintSHA256(key), "known_hosts", k.path)
	}
	return k.reload()
}

// Retired drops host's entries for the keys the hub retired. Only plain entries that
// name host alone are dropped: hashed, wildcard and marked lines are the operator's. A
// key the hub merely leaves out of its announcement stays: it may be another hub's
// behind the same name.
func (k *KnownHostsFile) Retired(log *slog.Logger, host string, retired []ssh.PublicKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	dropped, err := k.dropKeys(host, retired)
	if err != nil {
		return err
	}
	for _, fp := range dropped {
		log.Info("dropped a host key the hub retired", "hub", host, "key", fp, "known_hosts", k.path)
	}
	return k.reload()
}

func (k *KnownHostsFile) appendKeys(host string, keys []ssh.PublicKey) error {
	if len(keys) == 0 {
		return nil
	}
	f, err := os.OpenFile(k.path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("agent: known hosts: %w", err)
	}
	for _, key := range keys {
		if _, err := fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(host)}, key)); err != nil {
			f.Close()
			return fmt.Errorf("agent: known hosts: %w", err)
		}
	}
	return f.Close()
}

// dropKeys rewrites the file without host's plain entries for these keys, through a
// temporary file; it returns the fingerprints dropped.
func (k *KnownHostsFile) dropKeys(host string, keys []ssh.PublicKey) ([]string, error) {
	b, err := os.ReadFile(k.path)
	if err != nil {
		return nil, fmt.Errorf("agent: known hosts: %w", err)
	}
	want := knownhosts.Normalize(host)
	drop := map[string]bool{}
	for _, key := range keys {
		drop[string(key.Marshal())] = true
	}
	var out bytes.Buffer
	var dropped []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 3 && fields[0] == want {
			if key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.Join(fields[1:], " "))); err == nil && drop[string(key.Marshal())] {
				dropped = append(dropped, ssh.FingerprintSHA256(key))
				continue
			}
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("agent: known hosts: %w", err)
	}
	if len(dropped) == 0 {
		return nil, nil
	}
	fi, err := os.Stat(k.path)
	if err != nil {
		return nil, fmt.Errorf("agent: known hosts: %w", err)
	}
	if err := atomicfile.Write(k.path, out.Bytes(), atomicfile.Options{Mode: fi.Mode().Perm()}); err != nil {
		return nil, fmt.Errorf("agent: known hosts: %w", err)
	}
	return dropped, nil
}

// ServeHubRequests answers the hub's global requests on conn. Each announcement of its
// host keys goes to learner (nil: ignored), which has the hub prove the keys it picks,
// and so does each list of retired keys: an iotsafe hub announces every new set of keys
// to iotsafe clients on a live session. Everything else is refused.
func ServeHubRequests(conn ssh.Conn, host string, learner HostKeyLearner, log *slog.Logger, reqs <-chan *ssh.Request) {
	for r := range reqs {
		switch {
		case learner == nil:
		case r.Type == hostkey.AnnounceRequest:
			keys, err := hostkey.ParseKeys(r.Payload)
			if err != nil {
				log.Warn("the hub's host key announcement is malformed; ignored", "err", err)
			} else {
				go learnHostKeys(conn, host, learner, log, keys) // waits for the proof: never in this loop
			}
		case r.Type == hostkey.RetiredRequest:
			keys, err := hostkey.ParseKeys(r.Payload)
			if err == nil {
				err = learner.Retired(log, host, keys)
			}
			if err != nil {
				log.Warn("the hub's retired host keys were not dropped", "hub", host, "err", err)
			}
		}
		if r.WantReply {
			r.Reply(false, nil)
		}
	}
}

func learnHostKeys(conn ssh.Conn, host string, learner HostKeyLearner, log *slog.Logger, announced []ssh.PublicKey) {
	prove := learner.ToProve(host, conn.RemoteAddr(), announced)
	var proven []ssh.PublicKey
	if len(prove) > 0 {
		ok, reply, err := conn.SendRequest(hostkey.ProveRequest, true, hostkey.MarshalKeys(prove))
		switch {
		case err != nil:
			return // the session ended
		case !ok:
			log.Warn("the hub refused to prove the host keys it announced; nothing learned", "hub", host)
			return
		}
		if err := hostkey.VerifyProofs(conn.SessionID(), prove, reply); err != nil {
			log.Warn("the hub's proof of its host keys does not verify; nothing learned", "hub", host, "err", err)
			return
		}
		proven = prove
	}
	if err := learner.Proven(log, host, conn.RemoteAddr(), announced, proven); err != nil {
		log.Warn("recording the hub's host keys failed", "hub", host, "err", err)
	}
}
