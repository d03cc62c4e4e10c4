package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// Change is one domain operation. The types below are every change there is; each
// writes the registry and names its consequence on the live subsystems.
type Change interface {
	// Op names the change on the wire and in logs.
	Op() string
	// Subject is the device or account the change is about (for logs: never a secret).
	Subject() string
	check() error
	apply(ctx context.Context, c *Control) (Outcome, error)
}

// Why a session ends, as the device's log and the audit trail say.
const (
	WhyRevoked = "key revoked"
	WhyRemoved = "device removed"
)

// WhyProfileChanged is why a session ends when its profile is applied to live sessions.
func WhyProfileChanged(name string) string { return "profile " + name + " changed" }

func need(op string, fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return fmt.Errorf("%w: %s needs %s", ErrInvalid, op, fields[i])
		}
	}
	return nil
}

// noDevice turns a missing device into the error an operator can act on.
func noDevice(device string, err error) error {
	if errors.Is(err, registry.ErrNotFound) {
		return fmt.Errorf("no device %q: enroll it first with 'iotsafe device add %s': %w", device, device, err)
	}
	return err
}

// AddDevice enrolls a device with its public key (authorized_keys form; "" for none
// yet: a device an account registered over the REST API) and allocates its sockets; the
// hub then holds their ports and serves the device.
type AddDevice struct {
	Name    string   `json:"name"`
	Profile string   `json:"profile"`
	Key     string   `json:"key"`
	Groups  []string `json:"groups,omitempty"`
}

func (AddDevice) Op() string         { return "device.add" }
func (ch AddDevice) Subject() string { return ch.Name }
func (ch AddDevice) check() error {
	return need(ch.Op(), "a name", ch.Name, "a profile", ch.Profile)
}
func (ch AddDevice) apply(ctx context.Context, c *Control) (Outcome, error) {
	var key ssh.PublicKey // none: a device registered over the REST API gets one later
	if ch.Key != "" {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ch.Key))
		if err != nil {
			return Outcome{}, fmt.Errorf("%w: device.add: the key: %v", ErrInvalid, err)
		}
		key = k
	}
	d, err := c.store.AddDevice(ctx, ch.Name, ch.Profile, key, ch.Groups...)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Device: d}, c.reload()
}

// RevokeDevice refuses every key of the device from now on and closes what it holds.
type RevokeDevice struct {
	Device string `json:"device"`
	Reason string `json:"reason"`
}

func (RevokeDevice) Op() string         { return "device.revoke" }
func (ch RevokeDevice) Subject() string { return ch.Device }
func (ch RevokeDevice) check() error    { return need(ch.Op(), "a device", ch.Device) }
func (ch RevokeDevice) apply(ctx context.Context, c *Control) (Outcome, error) {
	n, err := c.closeAfter(ch.Device, "", WhyRevoked, true, func() error { return c.store.RevokeDevice(ctx, ch.Device, ch.Reason) })
	return Outcome{Closed: n}, err
}

// ReinstateDevice undoes a revocation: the device's keys revoked with it work again and
// its violation count starts at 0 (audited). A stolen device is removed, not reinstated.
type ReinstateDevice struct {
	Device string `json:"device"`
}

func (ReinstateDevice) Op() string         { return "device.reinstate" }
func (ch ReinstateDevice) Subject() string { return ch.Device }
func (ch ReinstateDevice) check() error    { return need(ch.Op(), "a device", ch.Device) }
func (ch ReinstateDevice) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.ReinstateDevice(ctx, ch.Device); err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.reload()
}

// RemoveDevice deletes the device, its keys and sockets, closes what it holds and drops
// its notifications.
type RemoveDevice struct {
	Device string `json:"device"`
}

func (RemoveDevice) Op() string         { return "device.remove" }
func (ch RemoveDevice) Subject() string { return ch.Device }
func (ch RemoveDevice) check() error    { return need(ch.Op(), "a device", ch.Device) }
func (ch RemoveDevice) apply(ctx context.Context, c *Control) (Outcome, error) {
	var grants int64
	n, err := c.closeAfter(ch.Device, "", WhyRemoved, false, func() (err error) {
		grants, err = c.store.RemoveDeviceAndGrants(ctx, ch.Device)
		return err
	})
	if err != nil {
		return Outcome{}, err
	}
	if c.live != nil {
		c.live.Forget(ch.Device)
	}
	return Outcome{Closed: n, GrantsRemoved: grants}, c.reload() // its sockets leave the policy and the kernel's rules
}

// AddKey gives a device another key (authorized_keys form); its other keys still work.
// Nothing live changes: the key is checked when a session logs in with it.
type AddKey struct {
	Device string `json:"device"`
	Key    string `json:"key"`
}

func (AddKey) Op() string         { return "device.key.add" }
func (ch AddKey) Subject() string { return ch.Device }
func (ch AddKey) check() error    { return need(ch.Op(), "a device", ch.Device, "a key", ch.Key) }
func (ch AddKey) apply(ctx context.Context, c *Control) (Outcome, error) {
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ch.Key))
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %s: the key: %v", ErrInvalid, ch.Op(), err)
	}
	return Outcome{}, c.store.AddKey(ctx, ch.Device, key)
}

// RevokeKey refuses one key of a device and closes the sessions that used it.
type RevokeKey struct {
	Device      string `json:"device"`
	Fingerprint string `json:"fingerprint"`
}

func (RevokeKey) Op() string         { return "device.key.revoke" }
func (ch RevokeKey) Subject() string { return ch.Device }
func (ch RevokeKey) check() error {
	return need(ch.Op(), "a device", ch.Device, "a key fingerprint", ch.Fingerprint)
}
func (ch RevokeKey) apply(ctx context.Context, c *Control) (Outcome, error) {
	n, err := c.closeAfter(ch.Device, ch.Fingerprint, WhyRevoked, true, func() error {
		return c.store.RevokeKey(ctx, ch.Device, ch.Fingerprint)
	})
	return Outcome{Closed: n}, err
}

// AddGroupInfo makes a network or device type (DeviceHive's) with no device yet: a
// device group network:NAME or devicetype:NAME with its numeric id.
type AddGroupInfo struct {
	Kind        string `json:"kind"` // registry.GroupNetwork or GroupDeviceType
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

func (AddGroupInfo) Op() string         { return "group.add" }
func (ch AddGroupInfo) Subject() string { return ch.Kind + ":" + ch.Name }
func (ch AddGroupInfo) check() error {
	return need(ch.Op(), "a kind", ch.Kind, "a name", ch.Name)
}
func (ch AddGroupInfo) apply(ctx context.Context, c *Control) (Outcome, error) {
	gi, err := c.store.AddGroupInfo(ctx, ch.Kind, ch.Name, ch.Description)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Group: &gi}, nil
}

// RemoveGroupInfo removes a network or device type that has no device.
type RemoveGroupInfo struct {
	Group string `json:"group"` // network:NAME or devicetype:NAME
}

func (RemoveGroupInfo) Op() string         { return "group.remove" }
func (ch RemoveGroupInfo) Subject() string { return ch.Group }
func (ch RemoveGroupInfo) check() error    { return need(ch.Op(), "a group", ch.Group) }
func (ch RemoveGroupInfo) apply(ctx context.Context, c *Control) (Outcome, error) {
	return Outcome{}, c.store.RemoveGroupInfo(ctx, ch.Group)
}

// AddJoinToken stores a join token by its hash (the token itself is shown once, by the
// command that made it): devices whose names match Names enrol their own keys with it.
type AddJoinToken struct {
	Hash    string    `json:"hash"`
	Label   string    `json:"label,omitempty"`
	Profile string    `json:"profile"`
	Names   string    `json:"names"`
	Uses    int       `json:"uses"`
	Expires time.Time `json:"expires"`
	Approve string    `json:"approve,omitempty"` // registry.ApproveAuto (""), ApproveManual
}

func (AddJoinToken) Op() string         { return "token.add" }
func (ch AddJoinToken) Subject() string { return ch.Names }
func (ch AddJoinToken) check() error {
	return need(ch.Op(), "a hash", ch.Hash, "a profile", ch.Profile, "names", ch.Names)
}
func (ch AddJoinToken) apply(ctx context.Context, c *Control) (Outcome, error) {
	id, err := c.store.AddJoinToken(ctx, ch.Hash, ch.Label, ch.Profile, ch.Names, ch.Uses, ch.Expires, ch.Approve)
	return Outcome{JoinTokenID: id}, err
}

// RevokeJoinToken refuses a join token from now on (devices it enrolled stay).
type RevokeJoinToken struct {
	ID int64 `json:"id"`
}

func (RevokeJoinToken) Op() string         { return "token.revoke" }
func (ch RevokeJoinToken) Subject() string { return fmt.Sprint(ch.ID) }
func (ch RevokeJoinToken) check() error {
	if ch.ID <= 0 {
		return fmt.Errorf("%w: %s: a token id", ErrInvalid, ch.Op())
	}
	return nil
}
func (ch RevokeJoinToken) apply(ctx context.Context, c *Control) (Outcome, error) {
	return Outcome{}, c.store.RevokeJoinToken(ctx, ch.ID)
}

// ApproveDevice lets in a device that joined pending approval.
type ApproveDevice struct {
	Device string `json:"device"`
}

func (ApproveDevice) Op() string         { return "device.approve" }
func (ch ApproveDevice) Subject() string { return ch.Device }
func (ch ApproveDevice) check() error    { return need(ch.Op(), "a device", ch.Device) }
func (ch ApproveDevice) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.ApproveDevice(ctx, ch.Device); err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.reload()
}

// JoinDevice enrols a device's own key under a join token (the hub's SSH join path).
type JoinDevice struct {
	Hash   string `json:"hash"` // of the token the device presented
	Name   string `json:"name"`
	Key    string `json:"key"` // authorized_keys form
	Remote string `json:"remote,omitempty"`
}

func (JoinDevice) Op() string         { return "device.join" }
func (ch JoinDevice) Subject() string { return ch.Name }
func (ch JoinDevice) check() error {
	return need(ch.Op(), "a token", ch.Hash, "a name", ch.Name, "a key", ch.Key)
}
func (ch JoinDevice) apply(ctx context.Context, c *Control) (Outcome, error) {
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(ch.Key))
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: device.join: the key: %v", ErrInvalid, err)
	}
	d, err := c.store.Join(ctx, ch.Hash, ch.Name, key, ch.Remote)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Device: d}, c.reload()
}

// SetGroups replaces the device groups of a device; grants to @GROUP follow at once.
type SetGroups struct {
	Device string   `json:"device"`
	Groups []string `json:"groups"`
}

func (SetGroups) Op() string         { return "device.groups" }
func (ch SetGroups) Subject() string { return ch.Device }
func (ch SetGroups) check() error    { return need(ch.Op(), "a device", ch.Device) }
func (ch SetGroups) apply(ctx context.Context, c *Control) (Outcome, error) {
	if _, err := c.store.Device(ctx, ch.Device); err != nil {
		return Outcome{}, err
	}
	if err := c.store.SetDeviceGroups(ctx, ch.Device, ch.Groups); err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.reload()
}

// SetDeviceSecret replaces a device's telemetry secret (its hash) for REST logins.
type SetDeviceSecret struct {
	Device string `json:"device"`
	Hash   string `json:"hash"`
}

func (SetDeviceSecret) Op() string         { return "device.secret" }
func (ch SetDeviceSecret) Subject() string { return ch.Device }
func (ch SetDeviceSecret) check() error {
	return need(ch.Op(), "a device", ch.Device, "a secret hash", ch.Hash)
}
func (ch SetDeviceSecret) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.SetDeviceSecret(ctx, ch.Device, ch.Hash); err != nil {
		return Outcome{}, noDevice(ch.Device, err)
	}
	return Outcome{}, c.reload()
}

// SetDeviceCert records a device's new client certificate; an earlier one stops logging
// in.
type SetDeviceCert struct {
	Device   string    `json:"device"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}

func (SetDeviceCert) Op() string         { return "device.cert" }
func (ch SetDeviceCert) Subject() string { return ch.Device }
func (ch SetDeviceCert) check() error {
	return need(ch.Op(), "a device", ch.Device, "a serial number", ch.Serial)
}
func (ch SetDeviceCert) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.SetDeviceCert(ctx, ch.Device, ch.Serial, ch.NotAfter); err != nil {
		return Outcome{}, noDevice(ch.Device, err)
	}
	return Outcome{}, c.reload()
}

// SetSOAPKey replaces a device's SOAP message key.
type SetSOAPKey struct {
	Device string `json:"device"`
	KeyID  string `json:"key_id"`
	Secret []byte `json:"secret"`
}

func (SetSOAPKey) Op() string         { return "device.soap-key" }
func (ch SetSOAPKey) Subject() string { return ch.Device }
func (ch SetSOAPKey) check() error {
	if len(ch.Secret) == 0 {
		return fmt.Errorf("%w: %s needs a secret", ErrInvalid, ch.Op())
	}
	return need(ch.Op(), "a device", ch.Device, "a key id", ch.KeyID)
}
func (ch SetSOAPKey) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.SetSOAPKey(ctx, registry.SOAPKey{Device: ch.Device, KeyID: ch.KeyID, Secret: ch.Secret}); err != nil {
		return Outcome{}, noDevice(ch.Device, err)
	}
	return Outcome{}, c.reload()
}

// AddGrant lets a principal reach a device's service (or a right on it). An account is
// named; its id is resolved here, so a re-created name does not inherit the grant. User
// and group ids are resolved by the caller, on the machine whose kernel reports them.
//
// The target must exist: an enrolled device with that service (an alias it has a
// protected socket for), or a device group with a member. AllowUnknown lifts that for
// a device or group not enrolled yet, or a service its profile will gain.
type AddGrant struct {
	Grant        registry.Grant `json:"grant"`
	AllowUnknown bool           `json:"allow_unknown,omitempty"`
}

func (AddGrant) Op() string         { return "grant.add" }
func (ch AddGrant) Subject() string { return ch.Grant.Target }
func (ch AddGrant) check() error    { return checkGrant(ch.Op(), ch.Grant) }
func (ch AddGrant) apply(ctx context.Context, c *Control) (Outcome, error) {
	return c.changeGrant(ctx, ch.Grant, func(ctx context.Context, g registry.Grant) error {
		if !ch.AllowUnknown {
			if err := c.grantTargetExists(ctx, g); err != nil {
				return err
			}
		}
		return c.store.AddGrant(ctx, g)
	})
}

// grantTargetExists refuses a grant to a device or group nobody enrolled, or to a
// service the device does not have: a typo would otherwise be a grant that never
// matches (or, worse, matches a device enrolled later under that name).
func (c *Control) grantTargetExists(ctx context.Context, g registry.Grant) error {
	if g.Target == registry.AllDevices {
		return nil // every device, whichever there are
	}
	if group, ok := strings.CutPrefix(g.Target, "@"); ok {
		groups, err := c.store.DeviceGroups(ctx)
		if err != nil {
			return err
		}
		for _, gs := range groups {
			if slices.Contains(gs, group) {
				return nil
			}
		}
		if registry.GroupKind(group) != "" {
			if _, err := c.store.GroupInfo(ctx, group); err == nil {
				return nil // a network or device type made empty
			}
		}
		return fmt.Errorf("%w: no device is in group %q ('iotsafe device set-groups DEVICE %s' puts one there; --allow-unknown grants to it before any is)", ErrInvalid, group, group)
	}
	d, err := c.store.Device(ctx, g.Target)
	if errors.Is(err, registry.ErrNotFound) {
		return fmt.Errorf("%w: no device %q is enrolled (--allow-unknown grants to a device not enrolled yet)", ErrInvalid, g.Target)
	}
	if err != nil {
		return err
	}
	if g.Alias == "*" || registry.IsRight(g.Alias) {
		return nil
	}
	var have []string
	for _, s := range d.Sockets {
		if s.Alias == g.Alias {
			return nil
		}
		have = append(have, s.Alias)
	}
	return fmt.Errorf("%w: device %s has no service %q (it has: %s; '*' is all of them; --allow-unknown for one its profile will gain)", ErrInvalid, g.Target, g.Alias, strings.Join(have, ", "))
}

// RemoveGrant removes a permission; new connections are refused at once.
type RemoveGrant struct {
	Grant registry.Grant `json:"grant"`
}

func (RemoveGrant) Op() string         { return "grant.remove" }
func (ch RemoveGrant) Subject() string { return ch.Grant.Target }
func (ch RemoveGrant) check() error    { return checkGrant(ch.Op(), ch.Grant) }
func (ch RemoveGrant) apply(ctx context.Context, c *Control) (Outcome, error) {
	return c.changeGrant(ctx, ch.Grant, c.store.RemoveGrant)
}

func checkGrant(op string, g registry.Grant) error {
	switch g.Kind {
	case registry.PrincipalUser, registry.PrincipalGroup, registry.PrincipalAccount:
	default:
		return fmt.Errorf("%w: %s: principal kind %q (user, group or account)", ErrInvalid, op, g.Kind)
	}
	return need(op, "a principal", g.Name, "a device or @group", g.Target, "an alias", g.Alias)
}

func (c *Control) changeGrant(ctx context.Context, g registry.Grant, write func(context.Context, registry.Grant) error) (Outcome, error) {
	if g.Kind == registry.PrincipalAccount {
		a, err := c.store.Account(ctx, g.Name)
		if err != nil {
			return Outcome{}, fmt.Errorf("no front-door account %q: add it with 'iotsafe account add %s'", g.Name, g.Name)
		}
		g.Name, g.XID = a.Name, uint32(a.ID)
	}
	if err := write(ctx, g); err != nil {
		return Outcome{}, err
	}
	return Outcome{Grant: &g}, c.reload()
}

// AddAccount creates a front-door account (PasswordHash "" logs in with tokens only).
type AddAccount struct {
	Name         string `json:"name"`
	PasswordHash string `json:"password_hash,omitempty"`
}

func (AddAccount) Op() string         { return "account.add" }
func (ch AddAccount) Subject() string { return ch.Name }
func (ch AddAccount) check() error    { return need(ch.Op(), "a name", ch.Name) }
func (ch AddAccount) apply(ctx context.Context, c *Control) (Outcome, error) {
	a, err := c.store.AddAccount(ctx, ch.Name, ch.PasswordHash)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Account: a}, c.reload()
}

// SetPassword replaces an account's password; its login sessions end.
type SetPassword struct {
	Account      string `json:"account"`
	PasswordHash string `json:"password_hash"`
}

func (SetPassword) Op() string         { return "account.passwd" }
func (ch SetPassword) Subject() string { return ch.Account }
func (ch SetPassword) check() error {
	return need(ch.Op(), "an account", ch.Account, "a password hash", ch.PasswordHash)
}
func (ch SetPassword) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.SetPassword(ctx, ch.Account, ch.PasswordHash); err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.reload()
}

// RemoveAccount deletes an account with its tokens and grants; its sessions end.
type RemoveAccount struct {
	Account string `json:"account"`
}

func (RemoveAccount) Op() string         { return "account.remove" }
func (ch RemoveAccount) Subject() string { return ch.Account }
func (ch RemoveAccount) check() error    { return need(ch.Op(), "an account", ch.Account) }
func (ch RemoveAccount) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.RemoveAccount(ctx, ch.Account); err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.reload()
}

// EndLoginSessions ends an account's login-page sessions (password and tokens stay).
type EndLoginSessions struct {
	Account string `json:"account"`
}

func (EndLoginSessions) Op() string         { return "account.logout" }
func (ch EndLoginSessions) Subject() string { return ch.Account }
func (ch EndLoginSessions) check() error    { return need(ch.Op(), "an account", ch.Account) }
func (ch EndLoginSessions) apply(ctx context.Context, c *Control) (Outcome, error) {
	n, err := c.store.EndLoginSessions(ctx, ch.Account)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Ended: n}, c.reload()
}

// AddToken stores an account's API token (its hash; the token is the caller's to show).
type AddToken struct {
	Account string     `json:"account"`
	Label   string     `json:"label,omitempty"`
	Hash    string     `json:"hash"`
	Expires *time.Time `json:"expires,omitempty"`
}

func (AddToken) Op() string         { return "account.token" }
func (ch AddToken) Subject() string { return ch.Account }
func (ch AddToken) check() error {
	return need(ch.Op(), "an account", ch.Account, "a token hash", ch.Hash)
}
func (ch AddToken) apply(ctx context.Context, c *Control) (Outcome, error) {
	id, err := c.store.AddToken(ctx, ch.Account, ch.Label, ch.Hash, ch.Expires)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{TokenID: id}, c.reload()
}

// RevokeToken revokes an account's API token; it is refused at once.
type RevokeToken struct {
	Account string `json:"account"`
	ID      int64  `json:"id"`
}

func (RevokeToken) Op() string         { return "account.token.revoke" }
func (ch RevokeToken) Subject() string { return ch.Account }
func (ch RevokeToken) check() error {
	if ch.ID <= 0 {
		return fmt.Errorf("%w: %s needs a token id", ErrInvalid, ch.Op())
	}
	return need(ch.Op(), "an account", ch.Account)
}
func (ch RevokeToken) apply(ctx context.Context, c *Control) (Outcome, error) {
	if err := c.store.RevokeToken(ctx, ch.Account, ch.ID); err != nil {
		return Outcome{}, err
	}
	return Outcome{}, c.reload()
}

// PutProfile stores (or replaces) a profile from its YAML. Live sessions keep the
// version they logged in with unless Restart is set: then every session that uses the
// profile, on every hub, is closed at once and comes back under the new version (an
// agent reconnects within seconds; a device behind a gateway is announced again).
type PutProfile struct {
	Spec    string `json:"spec"`
	Restart bool   `json:"restart,omitempty"`
}

func (PutProfile) Op() string { return "profile.put" }
func (ch PutProfile) Subject() string {
	if p, err := profile.Parse([]byte(ch.Spec)); err == nil {
		return p.Name
	}
	return ""
}
func (ch PutProfile) check() error {
	if err := need(ch.Op(), "a profile", ch.Spec); err != nil {
		return err
	}
	if _, err := profile.Parse([]byte(ch.Spec)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}
func (ch PutProfile) apply(ctx context.Context, c *Control) (Outcome, error) {
	p, err := profile.Parse([]byte(ch.Spec))
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c.mu.Lock() // the write and the close are one step against Follow's (closeAfter)
	defer c.mu.Unlock()
	if err := c.store.StoreProfile(ctx, p, ch.Restart); err != nil {
		return Outcome{}, err
	}
	if !ch.Restart || c.live == nil {
		return Outcome{}, nil
	}
	return Outcome{Closed: c.live.CloseProfile(p.Name, WhyProfileChanged(p.Name))}, nil
}
