package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// SSH certificate authorities: the hub accepts a device that presents an OpenSSH user
// certificate from a CA of ssh_cas. A CA without a profile vouches for devices already
// enrolled; a manufacturer's CA (with a profile) also enrols a device it vouches for on
// its first connection, binding the certificate's key to the name.

// Audit events of SSH certificates.
const (
	EventSSHCATrusted   = "ssh_ca_trusted"
	EventSSHCAUntrusted = "ssh_ca_untrusted"
	EventSSHCertSigned  = "ssh_cert_signed"
	EventSSHCertRevoked = "ssh_cert_revoked"
	EventSSHCertRefused = "ssh_cert_refused"
	EventEnrolledByCert = "enrolled_by_certificate"
)

const sshCANamePatternNote = "lower-case letters, digits and '-'"

// SSHCA is a certificate authority the hub trusts for devices.
type SSHCA struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	PublicKey   string    `json:"public_key"` // authorized_keys form
	Fingerprint string    `json:"fingerprint"`
	Pattern     string    `json:"names"`
	Profile     string    `json:"profile,omitempty"` // "": vouches for enrolled devices only
	Approve     string    `json:"approve,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// Enrols reports whether the CA enrols the devices it vouches for (zero-touch).
func (ca SSHCA) Enrols() bool { return ca.Profile != "" }

// Key is the CA's public key.
func (ca SSHCA) Key() (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ca.PublicKey))
	return k, err
}

// SSHCert is a certificate the hub signed, or a revocation of any CA's certificate.
type SSHCert struct {
	CAFingerprint  string     `json:"ca_fingerprint"`
	Serial         string     `json:"serial,omitempty"` // "": a revocation by key
	KeyFingerprint string     `json:"key_fingerprint"`
	PublicKey      string     `json:"public_key"`
	Device         string     `json:"device,omitempty"`
	KeyID          string     `json:"key_id,omitempty"`
	ValidBefore    *time.Time `json:"valid_before,omitempty"`
	SignedAt       time.Time  `json:"signed_at"`
	RevokedAt      *time.Time `json:"revoked_at,omitempty"`
	RevokeWhy      string     `json:"revoke_reason,omitempty"`
}

func oneLine(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }

// TrustSSHCA trusts key as a CA for devices named by pattern. With a profile it is a
// manufacturer's CA: it enrols the devices it vouches for, pending approval when approve
// is ApproveManual.
func (r *Registry) TrustSSHCA(ctx context.Context, name string, key ssh.PublicKey, pattern, profileName, approve string) (SSHCA, error) {
	if !validCAName(name) {
		return SSHCA{}, fmt.Errorf("registry: CA name %q: use %s (max 63)", name, sshCANamePatternNote)
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		return SSHCA{}, errors.New("registry: a CA is a plain public key, not a certificate")
	}
	if err := ValidNamePattern(pattern); err != nil {
		return SSHCA{}, fmt.Errorf("registry: %w", err)
	}
	if approve == "" {
		approve = ApproveAuto
	}
	if approve != ApproveAuto && approve != ApproveManual {
		return SSHCA{}, fmt.Errorf("registry: approve %q: want auto or manual", approve)
	}
	if profileName == "" && approve != ApproveAuto {
		return SSHCA{}, errors.New("registry: approval applies to a CA that enrols devices: give it a profile")
	}
	if profileName != "" {
		if _, err := r.Profile(ctx, profileName); err != nil {
			return SSHCA{}, err
		}
	}
	fp := ssh.FingerprintSHA256(key)
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var other string
		switch err := tx.QueryRowContext(ctx, `SELECT name FROM ssh_cas WHERE name=? OR fingerprint=?`, name, fp).Scan(&other); {
		case err == nil:
			return fmt.Errorf("%w: CA %q (the name, or this key)", ErrExists, other)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("registry: trust CA: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ssh_cas(name, public_key, fingerprint, pattern, profile, approve, created_at) VALUES(?,?,?,?,?,?,?)`,
			name, oneLine(key), fp, pattern, profileName, approve, now()); err != nil {
			return fmt.Errorf("registry: trust CA: %w", err)
		}
		what := "vouches for enrolled devices named " + pattern
		if profileName != "" {
			what = fmt.Sprintf("enrols devices named %s with profile %s, approve %s", pattern, profileName, approve)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventSSHCATrusted, Detail: fmt.Sprintf("CA %s %s: %s", name, fp, what)})
	})
	if err != nil {
		return SSHCA{}, err
	}
	return r.SSHCA(ctx, name)
}

func validCAName(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// UntrustSSHCA stops trusting a CA: its certificates are refused from now on (the
// devices it enrolled keep their keys).
func (r *Registry) UntrustSSHCA(ctx context.Context, name string) (SSHCA, error) {
	ca, err := r.SSHCA(ctx, name)
	if err != nil {
		return SSHCA{}, err
	}
	return ca, r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM ssh_cas WHERE name=?`, name); err != nil {
			return fmt.Errorf("registry: untrust CA: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventSSHCAUntrusted, Detail: fmt.Sprintf("CA %s %s", name, ca.Fingerprint)})
	})
}

const sshCACols = `id, name, public_key, fingerprint, pattern, profile, approve, created_at`

func scanSSHCA(row interface{ Scan(...any) error }) (SSHCA, error) {
	var ca SSHCA
	var created string
	if err := row.Scan(&ca.ID, &ca.Name, &ca.PublicKey, &ca.Fingerprint, &ca.Pattern, &ca.Profile, &ca.Approve, &created); err != nil {
		return SSHCA{}, err
	}
	ca.CreatedAt, _ = time.Parse(timeLayout, created)
	return ca, nil
}

// SSHCA is the trusted CA of that name.
func (r *Registry) SSHCA(ctx context.Context, name string) (SSHCA, error) {
	return r.oneSSHCA(ctx, `name=?`, name)
}

// SSHCAByFingerprint is the trusted CA whose key has that fingerprint (ErrNotFound: no
// CA of this hub's).
func (r *Registry) SSHCAByFingerprint(ctx context.Context, fp string) (SSHCA, error) {
	return r.oneSSHCA(ctx, `fingerprint=?`, fp)
}

func (r *Registry) oneSSHCA(ctx context.Context, where string, arg string) (SSHCA, error) {
	ca, err := scanSSHCA(r.db.QueryRowContext(ctx, `SELECT `+sshCACols+` FROM ssh_cas WHERE `+where, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return SSHCA{}, fmt.Errorf("%w: CA %s", ErrNotFound, arg)
	}
	if err != nil {
		return SSHCA{}, fmt.Errorf("registry: CA %s: %w", arg, err)
	}
	return ca, nil
}

// SSHCAs lists the trusted CAs by name.
func (r *Registry) SSHCAs(ctx context.Context) ([]SSHCA, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT `+sshCACols+` FROM ssh_cas ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("registry: CAs: %w", err)
	}
	defer rows.Close()
	out := []SSHCA{}
	for rows.Next() {
		ca, err := scanSSHCA(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ca)
	}
	return out, rows.Err()
}

// RecordSSHCert records a certificate the hub signed for device (before it is handed
// out, so its serial can be revoked).
func (r *Registry) RecordSSHCert(ctx context.Context, caFP string, serial uint64, device, keyID string, key ssh.PublicKey, validBefore time.Time) error {
	if serial == 0 {
		return errors.New("registry: a signed certificate needs a serial other than 0")
	}
	if _, err := r.Device(ctx, device); err != nil {
		return err
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO ssh_certs(ca_fingerprint, serial, key_fingerprint, public_key, device, key_id, valid_before, signed_at) VALUES(?,?,?,?,?,?,?,?)`,
			caFP, strconv.FormatUint(serial, 10), ssh.FingerprintSHA256(key), oneLine(key), device, keyID, validBefore.UTC().Format(timeLayout), now()); err != nil {
			return fmt.Errorf("registry: record certificate: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventSSHCertSigned, Detail: fmt.Sprintf("serial %d, key id %q, key %s, until %s", serial, keyID, ssh.FingerprintSHA256(key), validBefore.UTC().Format(time.RFC3339))})
	})
}

// SSHCertBySerial is the certificate of that CA and serial the hub signed or revoked.
func (r *Registry) SSHCertBySerial(ctx context.Context, caFP string, serial uint64) (SSHCert, error) {
	certs, err := r.sshCerts(ctx, `WHERE ca_fingerprint=? AND serial=?`, caFP, strconv.FormatUint(serial, 10))
	if err != nil {
		return SSHCert{}, err
	}
	if len(certs) == 0 {
		return SSHCert{}, fmt.Errorf("%w: certificate serial %d", ErrNotFound, serial)
	}
	return certs[0], nil
}

// SSHCerts lists the certificates the hub signed and the revocations, newest first.
func (r *Registry) SSHCerts(ctx context.Context) ([]SSHCert, error) {
	return r.sshCerts(ctx, ``)
}

func (r *Registry) sshCerts(ctx context.Context, where string, args ...any) ([]SSHCert, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT ca_fingerprint, serial, key_fingerprint, public_key, device, key_id, valid_before, signed_at, revoked_at, revoke_why FROM ssh_certs `+where+` ORDER BY id DESC`, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: certificates: %w", err)
	}
	defer rows.Close()
	out := []SSHCert{}
	for rows.Next() {
		var c SSHCert
		var before, revoked sql.NullString
		var signed string
		if err := rows.Scan(&c.CAFingerprint, &c.Serial, &c.KeyFingerprint, &c.PublicKey, &c.Device, &c.KeyID, &before, &signed, &revoked, &c.RevokeWhy); err != nil {
			return nil, err
		}
		c.ValidBefore, c.RevokedAt = parseTime(before), parseTime(revoked)
		c.SignedAt, _ = time.Parse(timeLayout, signed)
		out = append(out, c)
	}
	return out, rows.Err()
}

// RevokeSSHCert refuses a certificate from now on: by its CA and serial, or, with
// serial 0 (which many CAs give every certificate), by its key. The device's key, if
// the registry binds it to the device (a zero-touch enrolment), is revoked with it.
func (r *Registry) RevokeSSHCert(ctx context.Context, caFP string, serial uint64, key ssh.PublicKey, device, reason string) error {
	keyFP := ssh.FingerprintSHA256(key)
	ser := ""
	if serial != 0 {
		ser = strconv.FormatUint(serial, 10)
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		at := now()
		res, err := tx.ExecContext(ctx, `UPDATE ssh_certs SET revoked_at=?, revoke_why=? WHERE ca_fingerprint=? AND serial=? AND serial<>'' AND revoked_at IS NULL`, at, reason, caFP, ser)
		if err != nil {
			return fmt.Errorf("registry: revoke certificate: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO ssh_certs(ca_fingerprint, serial, key_fingerprint, public_key, device, signed_at, revoked_at, revoke_why) VALUES(?,?,?,?,?,?,?,?)`,
				caFP, ser, keyFP, oneLine(key), device, at, at, reason); err != nil {
				return fmt.Errorf("registry: revoke certificate: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at=? WHERE fingerprint=? AND device=? AND revoked_at IS NULL`, at, keyFP, device); err != nil {
			return fmt.Errorf("registry: revoke certificate: %w", err)
		}
		what := "serial " + ser
		if ser == "" {
			what = "every certificate of this key"
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventSSHCertRevoked, Detail: fmt.Sprintf("key %s: %s from CA %s: %s", keyFP, what, caFP, reason)})
	})
}

// SSHCertRevoked reports whether a certificate of that CA, serial and key is revoked.
func (r *Registry) SSHCertRevoked(ctx context.Context, caFP string, serial uint64, keyFP string) (bool, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM ssh_certs WHERE revoked_at IS NOT NULL AND
		((ca_fingerprint=? AND serial=? AND serial<>'') OR (serial='' AND key_fingerprint=?))`,
		caFP, strconv.FormatUint(serial, 10), keyFP).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("registry: certificate revocation: %w", err)
	}
	return n > 0, nil
}

// EnrolByCertificate enrols device name with the key of a certificate from the
// manufacturer's CA caFP, in one transaction: the CA must enrol devices, name must
// match its pattern and be free, the key must be nobody's. Pending approval when the
// CA says so. Refusals are ErrJoinRefused (or ErrExists) with what the device is told.
func (r *Registry) EnrolByCertificate(ctx context.Context, caFP, name string, key ssh.PublicKey, keyID string, serial uint64, remote string) (*Device, error) {
	if err := checkNewDevice(name, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJoinRefused, err)
	}
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		ca, err := scanSSHCA(tx.QueryRowContext(ctx, `SELECT `+sshCACols+` FROM ssh_cas WHERE fingerprint=?`, caFP))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: the certificate's CA is not trusted by this hub", ErrJoinRefused)
		case err != nil:
			return fmt.Errorf("registry: enrol by certificate: %w", err)
		case !ca.Enrols():
			return fmt.Errorf("%w: CA %s vouches for enrolled devices only: enrol %s first", ErrJoinRefused, ca.Name, name)
		}
		if ok, _ := path.Match(ca.Pattern, name); !ok {
			return fmt.Errorf("%w: CA %s enrols names %s, not %s", ErrJoinRefused, ca.Name, ca.Pattern, name)
		}
		prof, err := r.profileTx(ctx, tx, ca.Profile)
		if err != nil {
			return err
		}
		if err := r.addDeviceTx(ctx, tx, name, prof, key, nil); err != nil {
			return err
		}
		pending := ""
		if ca.Approve == ApproveManual {
			why := fmt.Sprintf("%s (certificate of CA %s)", PendingReason, ca.Name)
			if _, err := tx.ExecContext(ctx, `UPDATE devices SET revoked_at=?, revoke_why=? WHERE name=?`, now(), why, name); err != nil {
				return fmt.Errorf("registry: enrol by certificate: %w", err)
			}
			pending = ", pending approval"
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventEnrolledByCert, Remote: remote,
			Detail: fmt.Sprintf("certificate of CA %s, serial %d, key id %q, key %s%s", ca.Name, serial, keyID, ssh.FingerprintSHA256(key), pending)})
	})
	if err != nil {
		return nil, err
	}
	return r.Device(ctx, name)
}

// Revocations is what an OpenSSH key revocation list holds: the revoked serials per CA
// key, and the revoked keys (of certificates revoked by key, of revoked devices and of
// revoked keys).
type Revocations struct {
	Serials map[string][]uint64 // CA public key (authorized_keys form) -> serials
	Keys    []string            // authorized_keys form
}

// SSHRevocations collects the revocations for a KRL.
func (r *Registry) SSHRevocations(ctx context.Context) (Revocations, error) {
	out := Revocations{Serials: map[string][]uint64{}}
	cas := map[string]string{}
	list, err := r.SSHCAs(ctx)
	if err != nil {
		return out, err
	}
	for _, ca := range list {
		cas[ca.Fingerprint] = ca.PublicKey
	}
	certs, err := r.sshCerts(ctx, `WHERE revoked_at IS NOT NULL`)
	if err != nil {
		return out, err
	}
	for _, c := range certs {
		if c.Serial == "" {
			out.Keys = append(out.Keys, c.PublicKey)
			continue
		}
		ca, ok := cas[c.CAFingerprint]
		if !ok {
			continue // a CA no longer trusted: all of its certificates are refused anyway
		}
		n, err := strconv.ParseUint(c.Serial, 10, 64)
		if err == nil {
			out.Serials[ca] = append(out.Serials[ca], n)
		}
	}
	rows, err := r.db.QueryContext(ctx, `SELECT k.pubkey FROM keys k JOIN devices d ON d.name=k.device WHERE k.revoked_at IS NOT NULL OR d.revoked_at IS NOT NULL`)
	if err != nil {
		return out, fmt.Errorf("registry: revoked keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return out, err
		}
		out.Keys = append(out.Keys, k)
	}
	return out, rows.Err()
}
