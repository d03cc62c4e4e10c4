package agent

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/iotsafe/iotsafe/internal/hostkey"
	"golang.org/x/crypto/ssh"
)

// keySource gives the device key for each connection attempt. With a file it re-reads
// the file when it changed, so a rotated key installed in place is used at the next
// reconnect without restarting the agent; contents that do not parse leave the last good
// key in use.
type keySource struct {
	path   string // "" : the key given in Config is the only one
	signer ssh.Signer
	stamp  fileStamp
	log    *slog.Logger
}

// fileStamp tells whether a file changed: a replaced file (rename) has another inode,
// an edited one another size or time.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

func newKeySource(path string, signer ssh.Signer, log *slog.Logger) *keySource {
	k := &keySource{path: path, signer: signer, log: log}
	if path != "" {
		if fi, err := os.Stat(path); err == nil {
			k.stamp = stampOf(fi)
			warnReadable(log, path, fi)
		}
	}
	return k
}

// warnReadable warns when others than the key's owner may read a device key: anyone who
// reads it can pose as the device. The agent still runs (the hub cannot tell), as ssh
// refuses such keys but a device image may ship them that way.
func warnReadable(log *slog.Logger, path string, fi os.FileInfo) {
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		log.Warn("the device's private key is readable by group or others: whoever reads it can pose as the device (chmod 600)",
			"event", "key_file_readable", "file", path, "mode", m.String())
	}
}

// changed reports whether the key file differs from the one last read.
func (k *keySource) changed() bool {
	if k.path == "" {
		return false
	}
	fi, err := os.Stat(k.path)
	return err == nil && stampOf(fi) != k.stamp
}

// current returns the key to authenticate with now.
func (k *keySource) current() ssh.Signer {
	if k.path == "" {
		return k.signer
	}
	fi, err := os.Stat(k.path)
	if err != nil {
		k.log.Warn("cannot read the key file; using the key loaded before", "file", k.path, "err", err)
		return k.signer
	}
	st := stampOf(fi)
	if st == k.stamp {
		return k.signer
	}
	k.stamp = st
	warnReadable(k.log, k.path, fi)
	b, err := os.ReadFile(k.path)
	if err != nil {
		k.log.Warn("cannot read the key file; using the key loaded before", "file", k.path, "err", err)
		return k.signer
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		k.log.Warn("the key file changed but holds no usable private key; using the key loaded before", "file", k.path, "err", err)
		return k.signer
	}
	if fp := ssh.FingerprintSHA256(s.PublicKey()); fp != ssh.FingerprintSHA256(k.signer.PublicKey()) {
		k.log.Info("device key changed on disk; using it from now on", "file", k.path, "key", fp)
		k.signer = s
	}
	return k.signer
}

// GenerateKeyPair makes an ed25519 key pair at path (mode 0600) and path.pub, comment
// naming it; it refuses to replace files that exist.
func GenerateKeyPair(path, comment string) (ssh.PublicKey, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	pub, _ := ssh.NewPublicKey(priv.Public())
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " " + comment + "\n"
	pf, err := os.OpenFile(path+".pub", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w (remove the old key pair first if you mean to replace it)", err)
	}
	_, werr := pf.WriteString(line)
	if cerr := pf.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path + ".pub")
		return nil, werr
	}
	if err := hostkey.WritePrivateKey(path, priv, comment); err != nil {
		os.Remove(path + ".pub") // ours: created above
		return nil, fmt.Errorf("%w (remove the old key pair first if you mean to replace it)", err)
	}
	return pub, nil
}

// signers are what the agent offers the hub: its certificate, if it has one of its
// current key, then the key.
func (a *Agent) signers() []ssh.Signer {
	key := a.key.current()
	if a.cfg.Certificate == "" {
		return []ssh.Signer{key}
	}
	cs, err := CertSigner(a.cfg.Certificate, key)
	if err != nil {
		a.log.Warn("cannot use the device certificate; offering the key alone", "file", a.cfg.Certificate, "err", err)
		return []ssh.Signer{key}
	}
	return []ssh.Signer{cs, key}
}

// CertSigner reads an OpenSSH certificate file and pairs it with the key it certifies.
func CertSigner(path string, key ssh.Signer) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, err
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return nil, fmt.Errorf("%s holds a key, not a certificate", path)
	}
	return ssh.NewCertSigner(cert, key)
}
