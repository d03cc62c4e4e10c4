package sshd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

const (
	extDevice  = "iotsafe-device"
	extKeyType = "iotsafe-key-type"
	extPeer    = "iotsafe-peer-hub" // the connection is a peer hub's (Config.PeerHub)
)

func connKey(remote, local net.Addr) string { return remote.String() + "|" + local.String() }

// refuse builds an auth error whose message stock clients print to the user.
func refuse(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return &ssh.BannerError{Err: errors.New(msg), Message: "iotsafe: " + msg + "\r\n"}
}

// checkKey runs for every offered key, before the client has proved it holds the private
// key: it must not change any state.
func (s *Server) checkKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if name, ok := strings.CutPrefix(meta.User(), sshext.PeerUserPrefix); ok {
		return s.checkPeer(meta, name, key)
	}
	if meta.User() == sshext.JoinUser {
		return s.checkJoin(key)
	}
	if cert, ok := key.(*ssh.Certificate); ok {
		return s.checkCert(meta, cert)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	d, revoked, err := s.store.DeviceByKey(ctx, key)
	if errors.Is(err, registry.ErrNotFound) {
		s.log.Info("unknown device key", "user", meta.User(), "remote", meta.RemoteAddr().String(), "key", ssh.FingerprintSHA256(key))
		return nil, errors.New("unknown key")
	}
	if err != nil {
		s.log.Error("registry lookup failed", "err", err)
		return nil, errors.New("registry unavailable")
	}
	if meta.User() != d.Name {
		// Not naming the device: this runs before the client proved it holds the key.
		return nil, refuse("this key is not enrolled for device %q: connect as NAME@hub with the name given to 'iotsafe device add'", meta.User())
	}
	if revoked && registry.IsPending(d.RevokeWhy) {
		s.refusedEvent(registry.Event{Device: d.Name, Kind: registry.EventAuthRefused, Detail: d.RevokeWhy, Remote: meta.RemoteAddr().String()})
		return nil, refuse("device %q waits for the operator's approval ('iotsafe device approve %s' on the hub)", d.Name, d.Name)
	}
	if revoked {
		s.refusedEvent(registry.Event{Device: d.Name, Kind: registry.EventAuthRefused, Detail: "key revoked", Remote: meta.RemoteAddr().String()})
		return nil, refuse("the key of device %q is revoked", d.Name)
	}
	return &ssh.Permissions{Extensions: map[string]string{extDevice: d.Name, extKeyType: key.Type()}}, nil
}

// checkPeer admits a hub of the shared registry by the host key it published there.
func (s *Server) checkPeer(meta ssh.ConnMetadata, name string, key ssh.PublicKey) (*ssh.Permissions, error) {
	if s.cfg.PeerHub == nil {
		return nil, errors.New("this hub takes no peer hubs")
	}
	if err := s.cfg.PeerHub(name, key); err != nil {
		s.log.Warn("peer hub refused", "hub", name, "remote", meta.RemoteAddr().String(), "key", ssh.FingerprintSHA256(key), "err", err)
		return nil, errors.New("not a hub of this registry")
	}
	return &ssh.Permissions{Extensions: map[string]string{extPeer: name}}, nil
}

// admitSession runs once the client proved possession of the key. It enforces the
// device's session limit, taking over sessions that no longer answer.
func (s *Server) admitSession(meta ssh.ConnMetadata, key ssh.PublicKey, perms *ssh.Permissions, _ string) (*ssh.Permissions, error) {
	if perms.Extensions[extPeer] != "" || perms.Extensions[extJoin] != "" {
		return perms, nil // a peer hub, or a device enrolling its key: no device session
	}
	name := perms.Extensions[extDevice]
	remote := meta.RemoteAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	var d *registry.Device
	var keyFP string
	if cert, ok := key.(*ssh.Certificate); ok {
		var err error
		if d, err = s.admitCert(ctx, meta, cert, perms); err != nil {
			return nil, err
		}
		keyFP = ssh.FingerprintSHA256(cert.Key)
	} else {
		// Re-read: a revoke may have landed between the key query and the signature.
		got, revoked, err := s.store.DeviceByKey(ctx, key)
		if err != nil || revoked || got.Name != name {
			s.refusedEvent(registry.Event{Device: name, Kind: registry.EventAuthRefused, Detail: "key revoked", Remote: remote})
			return nil, refuse("the key of device %q is revoked", name)
		}
		d, keyFP = got, ssh.FingerprintSHA256(key)
	}
	prof, err := s.store.Profile(ctx, d.Profile)
	if err != nil {
		s.log.Error("profile lookup failed", "device", name, "profile", d.Profile, "err", err)
		return nil, refuse("device %q has no usable profile %q; ask the operator", name, d.Profile)
	}
	sess := newSession(s, d, prof, remote)
	sess.keyFP, sess.certCA = keyFP, perms.Extensions[extCertCA]
	if err := s.reserve(sess, connKey(meta.RemoteAddr(), meta.LocalAddr())); err != nil {
		s.violation(sess.device, prof, err.Error(), remote)
		return nil, refuse("%v", err)
	}
	return perms, nil
}

// refusedEvent records a refused login at most once a minute per device and source
// address, saying how many were held back since the last one: a revoked device that
// keeps retrying cannot fill the audit log.
func (s *Server) refusedEvent(e registry.Event) {
	host := e.Remote
	if h, _, err := net.SplitHostPort(e.Remote); err == nil {
		host = h
	}
	ok, n := s.auditGate.Allow(e.Device + "|" + e.Kind + "|" + host)
	if !ok {
		return
	}
	if n > 0 {
		e.Detail = fmt.Sprintf("%s (and %d more refused from %s since the last record)", e.Detail, n, host)
	}
	s.event(e)
}

func (s *Server) event(e registry.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	if err := s.store.AddEvent(ctx, e); err != nil {
		s.log.Error("recording event failed", "kind", e.Kind, "device", e.Device, "err", err)
	}
}
