package control

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// Store is the registry as the changes write it: *registry.Registry, or the hub's
// regguard.Guard, which holds revocations in memory when the registry cannot write.
type Store interface {
	Device(ctx context.Context, name string) (*registry.Device, error)
	Account(ctx context.Context, name string) (*registry.Account, error)

	AddDevice(ctx context.Context, name, profile string, key ssh.PublicKey, groups ...string) (*registry.Device, error)
	RevokeDevice(ctx context.Context, name, reason string) error
	ReinstateDevice(ctx context.Context, name string) error
	RemoveDeviceAndGrants(ctx context.Context, name string) (grants int64, err error)
	AddKey(ctx context.Context, device string, key ssh.PublicKey) error
	RevokeKey(ctx context.Context, device, fingerprint string) error
	SetDeviceGroups(ctx context.Context, device string, groups []string) error
	SetDeviceSecret(ctx context.Context, device, hash string) error
	SetDeviceCert(ctx context.Context, device, serial string, notAfter time.Time) error
	SetSOAPKey(ctx context.Context, k registry.SOAPKey) error
	StoreProfile(ctx context.Context, p *profile.Profile, applyNow bool) error

	DeviceGroups(ctx context.Context) (map[string][]string, error)
	GroupInfo(ctx context.Context, group string) (registry.GroupInfo, error)
	AddGroupInfo(ctx context.Context, kind, name, description string) (registry.GroupInfo, error)
	RemoveGroupInfo(ctx context.Context, group string) error
	AddJoinToken(ctx context.Context, hash, label, profile, pattern string, uses int, expires time.Time, approve string) (int64, error)
	ApproveDevice(ctx context.Context, name string) error
	RevokeJoinToken(ctx context.Context, id int64) error
	Join(ctx context.Context, hash, name string, key ssh.PublicKey, remote string) (*registry.Device, error)
	TrustSSHCA(ctx context.Context, name string, key ssh.PublicKey, pattern, profile, approve string) (registry.SSHCA, error)
	UntrustSSHCA(ctx context.Context, name string) (registry.SSHCA, error)
	RecordSSHCert(ctx context.Context, caFP string, serial uint64, device, keyID string, key ssh.PublicKey, validBefore time.Time) error
	RevokeSSHCert(ctx context.Context, caFP string, serial uint64, key ssh.PublicKey, device, reason string) error
	EnrolByCertificate(ctx context.Context, caFP, name string, key ssh.PublicKey, keyID string, serial uint64, remote string) (*registry.Device, error)
	AddGrant(ctx context.Context, g registry.Grant) error
	RemoveGrant(ctx context.Context, g registry.Grant) error

	AddAccount(ctx context.Context, name, passwordHash string) (*registry.Account, error)
	SetPassword(ctx context.Context, name, passwordHash string) error
	RemoveAccount(ctx context.Context, name string) error
	EndLoginSessions(ctx context.Context, account string) (int64, error)
	AddToken(ctx context.Context, account, label, hash string, expires *time.Time) (int64, error)
	RevokeToken(ctx context.Context, account string, id int64) error
}

// Live is what a running hub does about a change, across its subsystems (sshd today,
// with the REST API, MQTT and SOAP behind the same calls).
type Live interface {
	// Close ends the device's SSH sessions on this hub (only those that authenticated
	// with the key of that fingerprint, when it is not "") and returns how many.
	Close(device, fingerprint, why string) int
	// Refresh re-reads the devices for the other paths, so a revoked device's tokens,
	// MQTT clients and SOAP key stop working now (cheaper than Reload).
	Refresh()
	// Reload rebuilds the access policy and every subsystem's view of devices, accounts
	// and secrets from the registry (what Refresh does included). upTo is the newest change the caller knows of: a
	// hub that loaded its policy past it may skip the work (0: always reload).
	Reload(upTo int64) error
	// Forget drops what the hub keeps of a removed device beside the registry (its
	// notifications).
	Forget(device string)
	// Moved says that another hub of a shared registry now holds the device's session.
	Moved(device, hub string)
	// CloseProfile ends the SSH sessions on this hub that use the profile (they come
	// back under its new version) and returns how many.
	CloseProfile(profile, why string) int
	// CloseCA ends the SSH sessions on this hub that logged in with a certificate of
	// the CA of that fingerprint and returns how many.
	CloseCA(fingerprint, why string) int
}

// Control applies changes: the registry first, then the live consequences.
type Control struct {
	store Store
	live  Live
	// mu makes a change's write and its Close one step with respect to Follow's: the
	// feed delivers a change this Control made too, and whichever closes the sessions
	// first is the one that reports them. Held for session-ending changes only.
	mu sync.Mutex
}

// New returns a Control writing store and fanning out to live; live nil is the offline
// mode (no hub runs here: a hub applies the change from the registry's change feed when
// it reads it, or when it starts).
func New(store Store, live Live) *Control {
	return &Control{store: store, live: live}
}

// Online reports whether changes reach live subsystems (false in the offline mode).
func (c *Control) Online() bool { return c.live != nil }

// Outcome is what a change did.
type Outcome struct {
	// Closed is how many live SSH sessions the change ended on this hub.
	Closed int `json:"closed_sessions"`
	// Device is the enrolled device (AddDevice).
	Device *registry.Device `json:"device,omitempty"`
	// Account is the created account (AddAccount).
	Account *registry.Account `json:"account,omitempty"`
	// TokenID is the new token's id (AddToken).
	TokenID int64 `json:"token_id,omitempty"`
	// Ended counts the login sessions ended (EndLoginSessions).
	Ended int64 `json:"ended,omitempty"`
	// Grant is the grant as stored (AddGrant, RemoveGrant), its principal resolved.
	Grant *registry.Grant `json:"grant,omitempty"`
	// GrantsRemoved counts the grants to a removed device that went with it (RemoveDevice).
	GrantsRemoved int64 `json:"grants_removed,omitempty"`
	// Group is the network or device type made (AddGroupInfo).
	Group *registry.GroupInfo `json:"group,omitempty"`
	// JoinTokenID is the new join token's id (AddJoinToken).
	JoinTokenID int64 `json:"join_token_id,omitempty"`
	// CA is the certificate authority trusted or no longer trusted (TrustSSHCA, UntrustSSHCA).
	CA *registry.SSHCA `json:"ca,omitempty"`
}

// Apply writes the change to the registry and applies its consequences on this hub.
func (c *Control) Apply(ctx context.Context, ch Change) (Outcome, error) {
	if err := ch.check(); err != nil {
		return Outcome{}, err
	}
	return ch.apply(ctx, c)
}

// Revoke revokes a device and closes what it holds (sshd's violation handling and a
// gateway's uplink call it); it returns how many sessions it closed.
func (c *Control) Revoke(ctx context.Context, device, reason string) (int, error) {
	out, err := c.Apply(ctx, RevokeDevice{Device: device, Reason: reason})
	return out.Closed, err
}

// closeAfter runs write, then closes what device holds, as one step against Follow.
// refresh re-reads the other paths' view of the devices too; a change that reloads the
// policy afterwards passes false (a reload refreshes the views itself).
func (c *Control) closeAfter(device, fingerprint, why string, refresh bool, write func() error) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := write(); err != nil {
		return 0, err
	}
	if c.live == nil {
		return 0, nil
	}
	if refresh {
		c.live.Refresh()
	}
	return c.live.Close(device, fingerprint, why), nil
}

// reload tells the live subsystems the policy, the devices or the accounts changed.
func (c *Control) reload() error {
	if c.live == nil {
		return nil
	}
	if err := c.live.Reload(0); err != nil {
		return &ReloadError{Err: err}
	}
	return nil
}

// ReloadError means the change is in the registry but the running hub could not rebuild
// its policy from it.
type ReloadError struct{ Err error }

func (e *ReloadError) Error() string {
	return "the change is stored, but the running hub could not apply it: " + e.Err.Error()
}

func (e *ReloadError) Unwrap() error { return e.Err }

// ErrInvalid marks a change that is malformed (a missing device name, say).
var ErrInvalid = errors.New("control: invalid change")
