package control

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"
)

// WhyCertRevoked is why a session ends when its SSH certificate is revoked; WhyCAUntrusted,
// when the CA that vouched for it is no longer trusted.
const (
	WhyCertRevoked = "certificate revoked"
	WhyCAUntrusted = "certificate authority no longer trusted"
)

func parseKey(op, what, line string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s: %v", ErrInvalid, op, what, err)
	}
	return k, nil
}

// TrustSSHCA trusts a CA's key for device certificates whose principal matches Names;
// with a Profile, the CA also enrols the devices it vouches for (zero-touch).
type TrustSSHCA struct {
	Name    string `json:"name"`
	Key     string `json:"key"` // authorized_keys form
	Names   string `json:"names"`
	Profile string `json:"profile,omitempty"`
	Approve string `json:"approve,omitempty"`
}

func (TrustSSHCA) Op() string         { return "ca.trust" }
func (ch TrustSSHCA) Subject() string { return ch.Name }
func (ch TrustSSHCA) check() error {
	return need(ch.Op(), "a name", ch.Name, "a key", ch.Key, "names", ch.Names)
}
func (ch TrustSSHCA) apply(ctx context.Context, c *Control) (Outcome, error) {
	key, err := parseKey(ch.Op(), "the CA key", ch.Key)
	if err != nil {
		return Outcome{}, err
	}
	ca, err := c.store.TrustSSHCA(ctx, ch.Name, key, ch.Names, ch.Profile, ch.Approve)
	return Outcome{CA: &ca}, err
}

// UntrustSSHCA stops trusting a CA and closes the sessions it vouched for.
type UntrustSSHCA struct {
	Name string `json:"name"`
}

func (UntrustSSHCA) Op() string         { return "ca.untrust" }
func (ch UntrustSSHCA) Subject() string { return ch.Name }
func (ch UntrustSSHCA) check() error    { return need(ch.Op(), "a name", ch.Name) }
func (ch UntrustSSHCA) apply(ctx context.Context, c *Control) (Outcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ca, err := c.store.UntrustSSHCA(ctx, ch.Name)
	if err != nil || c.live == nil {
		return Outcome{CA: &ca}, err
	}
	return Outcome{CA: &ca, Closed: c.live.CloseCA(ca.Fingerprint, WhyCAUntrusted)}, nil
}

// RecordSSHCert records a certificate the hub's CA signs for a device, before it is
// handed out, so that its serial can be revoked on every hub.
type RecordSSHCert struct {
	CA          string    `json:"ca"` // fingerprint
	Serial      uint64    `json:"serial"`
	Device      string    `json:"device"`
	KeyID       string    `json:"key_id"`
	Key         string    `json:"key"`
	ValidBefore time.Time `json:"valid_before"`
}

func (RecordSSHCert) Op() string         { return "ca.record" }
func (ch RecordSSHCert) Subject() string { return ch.Device }
func (ch RecordSSHCert) check() error {
	if ch.Serial == 0 {
		return fmt.Errorf("%w: %s: a serial", ErrInvalid, ch.Op())
	}
	return need(ch.Op(), "a CA", ch.CA, "a device", ch.Device, "a key", ch.Key)
}
func (ch RecordSSHCert) apply(ctx context.Context, c *Control) (Outcome, error) {
	key, err := parseKey(ch.Op(), "the key", ch.Key)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.store.RecordSSHCert(ctx, ch.CA, ch.Serial, ch.Device, ch.KeyID, key, ch.ValidBefore)
}

// RevokeSSHCert refuses a device's certificate (by its CA and serial; by its key when
// the serial is 0) and closes the sessions that logged in with its key.
type RevokeSSHCert struct {
	CA     string `json:"ca"` // fingerprint
	Serial uint64 `json:"serial"`
	Key    string `json:"key"` // the certified key, authorized_keys form
	Device string `json:"device"`
	Reason string `json:"reason,omitempty"`
}

func (RevokeSSHCert) Op() string         { return "ca.revoke" }
func (ch RevokeSSHCert) Subject() string { return ch.Device }
func (ch RevokeSSHCert) check() error {
	return need(ch.Op(), "a CA", ch.CA, "a key", ch.Key, "a device", ch.Device)
}
func (ch RevokeSSHCert) apply(ctx context.Context, c *Control) (Outcome, error) {
	key, err := parseKey(ch.Op(), "the key", ch.Key)
	if err != nil {
		return Outcome{}, err
	}
	n, err := c.closeAfter(ch.Device, ssh.FingerprintSHA256(key), WhyCertRevoked, true, func() error {
		return c.store.RevokeSSHCert(ctx, ch.CA, ch.Serial, key, ch.Device, ch.Reason)
	})
	return Outcome{Closed: n}, err
}

// EnrolByCertificate enrols a device on its first connection with a certificate of a
// manufacturer's CA (the hub's SSH server, once the device proved it holds the key).
type EnrolByCertificate struct {
	CA     string `json:"ca"` // fingerprint
	Name   string `json:"name"`
	Key    string `json:"key"`
	KeyID  string `json:"key_id,omitempty"`
	Serial uint64 `json:"serial,omitempty"`
	Remote string `json:"remote,omitempty"`
}

func (EnrolByCertificate) Op() string         { return "device.enrol_by_certificate" }
func (ch EnrolByCertificate) Subject() string { return ch.Name }
func (ch EnrolByCertificate) check() error {
	return need(ch.Op(), "a CA", ch.CA, "a name", ch.Name, "a key", ch.Key)
}
func (ch EnrolByCertificate) apply(ctx context.Context, c *Control) (Outcome, error) {
	key, err := parseKey(ch.Op(), "the key", ch.Key)
	if err != nil {
		return Outcome{}, err
	}
	d, err := c.store.EnrolByCertificate(ctx, ch.CA, ch.Name, key, ch.KeyID, ch.Serial, ch.Remote)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Device: d}, c.reload()
}
