package agent

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// PinFingerprint trusts exactly the hub keys given, as "SHA256:..." (as printed by the
// hub at start and by ssh-keygen -lf); several, comma-separated, for an agent with
// several hubs of one registry (any of them may answer at any of their addresses: pin
// per address with a known_hosts file instead).
func PinFingerprint(fps string) (ssh.HostKeyCallback, error) {
	var pinned []string
	for _, fp := range strings.Split(fps, ",") {
		fp = strings.TrimSpace(fp)
		if !strings.HasPrefix(fp, "SHA256:") {
			return nil, fmt.Errorf("agent: --hub-key %q: want a SHA256:... fingerprint", fp)
		}
		pinned = append(pinned, fp)
	}
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		have := []byte(ssh.FingerprintSHA256(key))
		ok := 0
		for _, fp := range pinned {
			ok |= subtle.ConstantTimeCompare(have, []byte(fp))
		}
		if ok != 1 {
			return fmt.Errorf("fingerprint is not the pinned %s", strings.Join(pinned, " or "))
		}
		return nil
	}, nil
}

// KnownHosts trusts the keys in an OpenSSH known_hosts file. With tofu, a hub that has
// no entry yet is trusted once and recorded; a changed key is always refused.
func KnownHosts(path string, tofu bool) (ssh.HostKeyCallback, error) {
	if tofu {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("agent: known hosts: %w", err)
		}
		f.Close()
	}
	check, err := knownhosts.New(path)
	if err != nil {
		return nil, fmt.Errorf("agent: known hosts %s: %w", path, err)
	}
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		err := check(host, remote, key)
		var ke *knownhosts.KeyError
		if tofu && errors.As(err, &ke) && len(ke.Want) == 0 {
			f, ferr := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
			if ferr != nil {
				return ferr
			}
			defer f.Close()
			_, ferr = fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(host)}, key))
			return ferr
		}
		return err
	}, nil
}
