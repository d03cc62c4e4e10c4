package sshd

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// CertAuthorities is the store's record of the SSH CAs the hub trusts for devices and
// of revoked certificates (registry.SSHCA). With a store that has none, every
// certificate is refused.
type CertAuthorities interface {
	SSHCAByFingerprint(ctx context.Context, fp string) (registry.SSHCA, error)
	SSHCertRevoked(ctx context.Context, caFP string, serial uint64, keyFP string) (bool, error)
}

// Extensions of a connection that logged in with a certificate.
const (
	extCertCA     = "iotsafe-cert-ca"     // the CA's fingerprint
	extCertSerial = "iotsafe-cert-serial" // decimal
	extCertEnrol  = "iotsafe-cert-enrol"  // "1": enrol the device once it proved the key
)

// certRefused audits a refused certificate and builds the error its client prints.
func (s *Server) certRefused(meta ssh.ConnMetadata, cert *ssh.Certificate, format string, args ...any) error {
	why := fmt.Sprintf(format, args...)
	s.refusedEvent(registry.Event{Device: meta.User(), Kind: registry.EventSSHCertRefused, Remote: meta.RemoteAddr().String(),
		Detail: fmt.Sprintf("%s (serial %d, key id %q, key %s, CA %s)", why, cert.Serial, cert.KeyId, ssh.FingerprintSHA256(cert.Key), ssh.FingerprintSHA256(cert.SignatureKey))})
	return refuse("%s", why)
}

// checkCert admits a device certificate before the client proved it holds the key: a
// user certificate of a trusted CA, valid now, naming exactly the device it logs in as
// (within the CA's pattern), with no critical option but source-address (checked), and
// not revoked. The device must be enrolled, unless the CA enrols devices; then its name
// must be free or bound to this very key. Nothing is written here.
func (s *Server) checkCert(meta ssh.ConnMetadata, cert *ssh.Certificate) (*ssh.Permissions, error) {
	cas, ok := s.store.(CertAuthorities)
	if !ok {
		return nil, refuse("this hub takes no certificates")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	name := meta.User()
	caFP := ssh.FingerprintSHA256(cert.SignatureKey)
	ca, err := cas.SSHCAByFingerprint(ctx, caFP)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, s.certRefused(meta, cert, "the certificate is signed by a CA this hub does not trust (%s)", caFP)
	}
	if err != nil {
		s.log.Error("registry lookup failed", "err", err)
		return nil, errors.New("registry unavailable")
	}
	if cert.CertType != ssh.UserCert {
		return nil, s.certRefused(meta, cert, "a host certificate cannot log in a device")
	}
	if len(cert.ValidPrincipals) != 1 {
		return nil, s.certRefused(meta, cert, "a device certificate names exactly one device; this one names %d", len(cert.ValidPrincipals))
	}
	if p := cert.ValidPrincipals[0]; p != name {
		return nil, s.certRefused(meta, cert, "the certificate is for %q: connect as %s@hub", p, p)
	}
	if ok, _ := path.Match(ca.Pattern, name); !ok {
		return nil, s.certRefused(meta, cert, "CA %s vouches for names %s, not %s", ca.Name, ca.Pattern, name)
	}
	now := time.Now()
	switch {
	case cert.ValidAfter != 0 && now.Before(time.Unix(int64(min(cert.ValidAfter, 1<<63-1)), 0)):
		return nil, s.certRefused(meta, cert, "the certificate is not valid before %s", time.Unix(int64(cert.ValidAfter), 0).UTC().Format(time.RFC3339))
	case cert.ValidBefore != ssh.CertTimeInfinity && !now.Before(time.Unix(int64(min(cert.ValidBefore, 1<<63-1)), 0)):
		return nil, s.certRefused(meta, cert, "the certificate expired at %s", time.Unix(int64(cert.ValidBefore), 0).UTC().Format(time.RFC3339))
	}
	for opt := range cert.CriticalOptions {
		if opt != "source-address" {
			return nil, s.certRefused(meta, cert, "the certificate has a critical option this hub does not understand: %s", opt)
		}
	}
	checker := ssh.CertChecker{
		IsUserAuthority: func(auth ssh.PublicKey) bool { return ssh.FingerprintSHA256(auth) == caFP },
		Clock:           func() time.Time { return now },
	}
	if _, err := checker.Authenticate(meta, cert); err != nil {
		return nil, s.certRefused(meta, cert, "the certificate does not check: %v", strings.TrimPrefix(err.Error(), "ssh: "))
	}
	keyFP := ssh.FingerprintSHA256(cert.Key)
	revoked, err := cas.SSHCertRevoked(ctx, caFP, cert.Serial, keyFP)
	if err != nil {
		s.log.Error("registry lookup failed", "err", err)
		return nil, errors.New("registry unavailable")
	}
	if revoked {
		return nil, s.certRefused(meta, cert, "the certificate is revoked")
	}
	perms := &ssh.Permissions{Extensions: map[string]string{extDevice: name, extKeyType: cert.Key.Type(),
		extCertCA: caFP, extCertSerial: strconv.FormatUint(cert.Serial, 10)}}
	d, err := s.store.Device(ctx, name)
	switch {
	case errors.Is(err, registry.ErrNotFound) && ca.Enrols():
		perms.Extensions[extCertEnrol] = "1"
		return perms, nil
	case errors.Is(err, registry.ErrNotFound):
		return nil, s.certRefused(meta, cert, "no device %q is enrolled: CA %s vouches for enrolled devices only", name, ca.Name)
	case err != nil:
		s.log.Error("registry lookup failed", "err", err)
		return nil, errors.New("registry unavailable")
	}
	if ca.Enrols() {
		// A manufacturer's CA bound the name to the key it enrolled: another key with the
		// same principal is a cloned identity.
		if owner, _, err := s.store.DeviceByKey(ctx, cert.Key); err != nil || owner.Name != name {
			return nil, s.certRefused(meta, cert, "device %q is enrolled with another key: a second key with its name is refused (a cloned identity?)", name)
		}
	}
	if d.Revoked() && registry.IsPending(d.RevokeWhy) {
		s.refusedEvent(registry.Event{Device: name, Kind: registry.EventAuthRefused, Detail: d.RevokeWhy, Remote: meta.RemoteAddr().String()})
		return nil, refuse("device %q waits for the operator's approval ('iotsafe device approve %s' on the hub)", name, name)
	}
	if d.Revoked() {
		s.refusedEvent(registry.Event{Device: name, Kind: registry.EventAuthRefused, Detail: "device revoked", Remote: meta.RemoteAddr().String()})
		return nil, refuse("device %q is revoked", name)
	}
	return perms, nil
}

// admitCert runs once the client proved it holds the certificate's key: it enrols the
// device if its CA said so (checkCert), and reads the device again (a revocation may
// have landed meanwhile).
func (s *Server) admitCert(ctx context.Context, meta ssh.ConnMetadata, cert *ssh.Certificate, perms *ssh.Permissions) (*registry.Device, error) {
	name, remote := perms.Extensions[extDevice], meta.RemoteAddr().String()
	if perms.Extensions[extCertEnrol] == "1" {
		if s.cfg.EnrolByCert == nil {
			return nil, refuse("this hub enrols no devices by certificate: ask its operator to enrol %s", name)
		}
		serial, _ := strconv.ParseUint(perms.Extensions[extCertSerial], 10, 64)
		pending, err := s.cfg.EnrolByCert(ctx, perms.Extensions[extCertCA], name, cert.Key, cert.KeyId, serial, remote)
		if err != nil {
			why := err.Error()
			if !errors.Is(err, registry.ErrJoinRefused) && !errors.Is(err, registry.ErrExists) {
				s.log.Error("enrolment by certificate failed", "device", name, "remote", remote, "err", err)
				why = "the hub could not enrol the device now; retry later"
			}
			return nil, s.certRefused(meta, cert, "%s", why)
		}
		s.log.Info("device enrolled by its certificate", "device", name, "remote", remote, "key", ssh.FingerprintSHA256(cert.Key), "pending_approval", pending)
		if pending {
			return nil, refuse("device %q is enrolled and waits for the operator's approval ('iotsafe device approve %s' on the hub)", name, name)
		}
	}
	d, err := s.store.Device(ctx, name)
	if err != nil || d.Revoked() {
		s.refusedEvent(registry.Event{Device: name, Kind: registry.EventAuthRefused, Detail: "device revoked", Remote: remote})
		return nil, refuse("device %q is revoked", name)
	}
	if cas, ok := s.store.(CertAuthorities); ok {
		if revoked, err := cas.SSHCertRevoked(ctx, perms.Extensions[extCertCA], cert.Serial, ssh.FingerprintSHA256(cert.Key)); err != nil || revoked {
			return nil, refuse("the certificate is revoked")
		}
	}
	return d, nil
}
