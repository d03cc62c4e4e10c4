package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// A CA with a profile enrols the devices it vouches for, once per name and key; one
// without vouches for enrolled devices only. Revocations by serial and by key are
// found again, and a zero-touch device's bound key goes with its certificate.
func TestSSHCertificateAuthorities(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	caKey, fleetKey := newKey(t), newKey(t)
	if _, err := r.TrustSSHCA(ctx, "Bad Name", caKey, "*", "", ""); err == nil {
		t.Error("a CA name with spaces was taken")
	}
	if _, err := r.TrustSSHCA(ctx, "acme", caKey, "sensor-*", "nosuch", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("a CA enrolling with an unknown profile: %v", err)
	}
	if _, err := r.TrustSSHCA(ctx, "fleet", fleetKey, "*", "", ApproveManual); err == nil {
		t.Error("approval for a CA that enrols nothing was taken")
	}
	acme, err := r.TrustSSHCA(ctx, "acme", caKey, "sensor-*", "default", "")
	if err != nil || !acme.Enrols() || acme.Fingerprint != ssh.FingerprintSHA256(caKey) {
		t.Fatalf("trust: %+v %v", acme, err)
	}
	if _, err := r.TrustSSHCA(ctx, "acme2", caKey, "*", "", ""); !errors.Is(err, ErrExists) {
		t.Errorf("the same key trusted twice: %v", err)
	}
	fleet, err := r.TrustSSHCA(ctx, "fleet", fleetKey, "*", "", "")
	if err != nil || fleet.Enrols() {
		t.Fatalf("trust fleet: %+v %v", fleet, err)
	}

	k1 := newKey(t)
	if d, err := r.EnrolByCertificate(ctx, acme.Fingerprint, "sensor-1", k1, "sensor-1@acme", 11, "127.0.0.1:9"); err != nil || d.Name != "sensor-1" {
		t.Fatalf("enrol: %+v %v", d, err)
	}
	for _, c := range []struct {
		what, ca, name string
		want           string
	}{
		{"outside the pattern", acme.Fingerprint, "cam-1", "enrols names sensor-*"},
		{"a CA that only vouches", fleet.Fingerprint, "sensor-2", "vouches for enrolled devices only"},
		{"a CA not trusted", "SHA256:nope", "sensor-3", "not trusted"},
	} {
		if _, err := r.EnrolByCertificate(ctx, c.ca, c.name, newKey(t), "", 1, ""); !errors.Is(err, ErrJoinRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.what, err, c.want)
		}
		if _, err := r.Device(ctx, c.name); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %s enrolled all the same", c.what, c.name)
		}
	}
	if _, err := r.EnrolByCertificate(ctx, acme.Fingerprint, "sensor-1", newKey(t), "", 12, ""); !errors.Is(err, ErrExists) {
		t.Errorf("a second key for the same name: %v", err)
	}

	// The hub's signed certificate, revoked by serial; another revoked by key.
	if err := r.RecordSSHCert(ctx, fleet.Fingerprint, 0, "sensor-1", "", k1, time.Now()); err == nil {
		t.Error("serial 0 recorded")
	}
	k2 := newKey(t)
	if err := r.RecordSSHCert(ctx, fleet.Fingerprint, 42, "sensor-1", "sensor-1 #42", k2, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if c, err := r.SSHCertBySerial(ctx, fleet.Fingerprint, 42); err != nil || c.Device != "sensor-1" || c.RevokedAt != nil {
		t.Fatalf("recorded: %+v %v", c, err)
	}
	revoked := func(ca string, serial uint64, key ssh.PublicKey) bool {
		t.Helper()
		ok, err := r.SSHCertRevoked(ctx, ca, serial, ssh.FingerprintSHA256(key))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if revoked(fleet.Fingerprint, 42, k2) {
		t.Fatal("revoked before its revocation")
	}
	if err := r.RevokeSSHCert(ctx, fleet.Fingerprint, 42, k2, "sensor-1", "lost"); err != nil {
		t.Fatal(err)
	}
	if !revoked(fleet.Fingerprint, 42, k2) || revoked(fleet.Fingerprint, 43, k2) || revoked(acme.Fingerprint, 42, k2) {
		t.Error("revocation by serial: wrong certificates refused")
	}
	// Serial 0: by key, whatever the CA; the bound key of a zero-touch device goes too.
	if err := r.RevokeSSHCert(ctx, acme.Fingerprint, 0, k1, "sensor-1", "cloned"); err != nil {
		t.Fatal(err)
	}
	if !revoked(fleet.Fingerprint, 0, k1) || !revoked(acme.Fingerprint, 99, k1) {
		t.Error("revocation by key: a certificate of the key still accepted")
	}
	if _, gone, _ := r.DeviceByKey(ctx, k1); !gone {
		t.Error("the zero-touch device's bound key still works after its certificate was revoked")
	}
	rev, err := r.SSHRevocations(ctx)
	if err != nil || len(rev.Serials[fleet.PublicKey]) != 1 || rev.Serials[fleet.PublicKey][0] != 42 || len(rev.Keys) < 2 {
		t.Fatalf("revocations: %+v %v", rev, err)
	}
	// Removed and enrolled again under the same name: the certificates signed for the
	// old enrolment do not log in the new one.
	k3 := newKey(t)
	if err := r.RecordSSHCert(ctx, fleet.Fingerprint, 77, "sensor-1", "", k3, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveDevice(ctx, "sensor-1"); err != nil {
		t.Fatal(err)
	}
	if !revoked(fleet.Fingerprint, 77, k3) {
		t.Error("a certificate signed for a removed device still logs in under its name")
	}
	if _, err := r.UntrustSSHCA(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SSHCAByFingerprint(ctx, acme.Fingerprint); !errors.Is(err, ErrNotFound) {
		t.Errorf("an untrusted CA still found: %v", err)
	}
}
