package sshca

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hostkey"
)

// Dir is the CA's folder in the data folder; KeyFile its private key there.
const (
	Dir     = "ssh_ca"
	KeyFile = "ca_ed25519"
)

// Path is where the CA key of data folder dir is.
func Path(dir string) string { return filepath.Join(dir, Dir, KeyFile) }

// ErrNoCA: the data folder has no CA key ('iotsafe ca init' makes it).
var ErrNoCA = errors.New("sshca: no CA key here: make it with 'iotsafe ca init'")

// Create makes the CA key (ed25519, mode 0600, in a folder of mode 0700) and its .pub;
// it reads the key that is there instead, with created false.
func Create(dir string) (ca ssh.Signer, created bool, err error) {
	path := Path(dir)
	if ca, err := Load(dir); err == nil {
		return ca, false, nil
	} else if !errors.Is(err, ErrNoCA) {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("sshca: %w", err)
	}
	if ca, err = hostkey.LoadOrCreateKey(path); err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(ca.PublicKey()), 0o644); err != nil {
		return nil, false, fmt.Errorf("sshca: %w", err)
	}
	return ca, true, nil
}

// Load reads the CA key of data folder dir (ErrNoCA if there is none).
func Load(dir string) (ssh.Signer, error) {
	path := Path(dir)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoCA
	}
	return hostkey.LoadPrivateKey(path)
}

// NewSerial is a random serial for a certificate, never 0 (which OpenSSH reads as "no
// serial", and revocation by serial cannot name).
func NewSerial() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if n := binary.BigEndian.Uint64(b[:]) >> 1; n != 0 { // 63 bits: fits every database's integer
			return n, nil
		}
	}
}

// Request is a certificate to sign.
type Request struct {
	Key        ssh.PublicKey
	Serial     uint64
	KeyID      string
	Principals []string
	Validity   time.Duration
	Host       bool // a host certificate (a hub's), not a user one (a device's)
}

// clockSkew is how far before now a certificate is valid from: a device whose clock
// lags a little still takes a fresh one.
const clockSkew = 5 * time.Minute

// Sign makes the certificate. A device's certificate carries the usual permissions of
// an OpenSSH user certificate (the hub does not read them; stock sshd does) and no
// critical option.
func Sign(ca ssh.Signer, r Request, now time.Time) (*ssh.Certificate, error) {
	if _, isCert := r.Key.(*ssh.Certificate); isCert {
		return nil, errors.New("sshca: the key to sign is a certificate: give the plain public key")
	}
	if len(r.Principals) == 0 {
		return nil, errors.New("sshca: a certificate needs a principal (the device's name, the hub's host name)")
	}
	if r.Validity <= 0 {
		return nil, errors.New("sshca: a certificate needs a validity")
	}
	c := &ssh.Certificate{
		Key:             r.Key,
		Serial:          r.Serial,
		CertType:        ssh.UserCert,
		KeyId:           r.KeyID,
		ValidPrincipals: r.Principals,
		ValidAfter:      uint64(now.Add(-clockSkew).Unix()),
		ValidBefore:     uint64(now.Add(r.Validity).Unix()),
		Permissions: ssh.Permissions{Extensions: map[string]string{
			"permit-port-forwarding": "", "permit-pty": "",
		}},
	}
	if r.Host {
		c.CertType, c.Permissions = ssh.HostCert, ssh.Permissions{}
	}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		return nil, fmt.Errorf("sshca: sign: %w", err)
	}
	return c, nil
}

// CertPathFor is where OpenSSH looks for the certificate of a key file: beside it, its
// name ending in -cert.pub (foo or foo.pub -> foo-cert.pub).
func CertPathFor(keyFile string) string {
	return trimPub(keyFile) + "-cert.pub"
}

func trimPub(p string) string {
	if filepath.Ext(p) == ".pub" {
		return p[:len(p)-len(".pub")]
	}
	return p
}
