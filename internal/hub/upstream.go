package hub

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/hostkey"
	"github.com/iotsafe/iotsafe/internal/hostport"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/uplink"
)

// UpstreamConfig makes the hub a gateway (paper 000, three-level scheme): it keeps
// serving its own devices and relays them to a central hub over one SSH session.
type UpstreamConfig struct {
	// Hub is the centre's SSH address (host:port); "" means no upstream.
	Hub string `yaml:"hub"`
	// HubKey pins the centre's host key ("SHA256:...", as the centre prints at start).
	HubKey string `yaml:"hub_key"`
	// Name is the gateway's device name at the centre; "" means this machine's short
	// host name.
	Name string `yaml:"name"`
	// Key is the gateway's private key; "" means DATA/gateway_key, created (ed25519,
	// mode 0600) at the first start with its .pub beside it for enrolment at the centre.
	Key string `yaml:"key"`
}

// GatewayKeyName is the gateway's key in the data folder when upstream.key is not set.
const GatewayKeyName = "gateway_key"

// Enabled reports whether the hub has an upstream.
func (u UpstreamConfig) Enabled() bool { return u.Hub != "" }

func (u *UpstreamConfig) applyDefaults() {
	if u.Enabled() && u.Name == "" {
		if h, err := os.Hostname(); err == nil {
			u.Name, _, _ = strings.Cut(strings.ToLower(h), ".")
		}
	}
}

func (u UpstreamConfig) validate() error {
	if !u.Enabled() {
		if u.HubKey != "" || u.Name != "" || u.Key != "" {
			return errors.New("upstream: hub_key, name or key set without upstream.hub")
		}
		return nil
	}
	if err := hostport.Dial(u.Hub); err != nil {
		return fmt.Errorf("upstream.hub: %v: want host:port of the centre's SSH server", err)
	}
	if !strings.HasPrefix(u.HubKey, "SHA256:") {
		return fmt.Errorf("upstream.hub_key: pin the centre's host key as SHA256:... (the centre prints it at start; ssh-keyscan -p PORT HOST | ssh-keygen -lf -)")
	}
	if !profile.ValidName(u.Name) {
		return fmt.Errorf("upstream.name %q: the gateway's device name at the centre (lower-case letters, digits, '-')", u.Name)
	}
	return nil
}

// startUplink loads (or creates) the gateway key and keeps the session to the centre.
func (h *Hub) startUplink(ctx context.Context) error {
	u := h.cfg.Upstream
	if !u.Enabled() {
		return nil
	}
	keyPath := u.Key
	if keyPath == "" {
		keyPath = filepath.Join(h.dir, GatewayKeyName)
	}
	_, statErr := os.Stat(keyPath)
	signer, err := hostkey.LoadOrCreateKey(keyPath)
	if err != nil {
		return fmt.Errorf("upstream.key: %w", err)
	}
	pub := keyPath + ".pub"
	if _, err := os.Stat(pub); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(pub, ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o644); err != nil {
			return fmt.Errorf("upstream: writing %s: %w", pub, err)
		}
	}
	if statErr != nil {
		h.log.Warn("created the gateway key; enrol it at the centre with a gateway profile",
			"key", pub, "fingerprint", ssh.FingerprintSHA256(signer.PublicKey()),
			"at_the_centre", fmt.Sprintf("iotsafe device add %s --profile GATEWAY-PROFILE --key %s", u.Name, filepath.Base(pub)))
	}
	pin, err := agent.PinFingerprint(u.HubKey)
	if err != nil {
		return fmt.Errorf("upstream.hub_key: %w", err)
	}
	uc := uplink.Config{
		Hub: u.Hub, Name: u.Name, Signer: signer, HostKey: pin.Check, HostKeys: pin, Local: h.ssh,
		Revoked: h.revokedUpstream, Logger: h.log,
	}
	switch {
	case h.store != nil && h.store.Shared():
		// Every hub of the registry would relay every hub's notifications, and the centre
		// would refuse the other gateways' devices as this one's violations.
		h.log.Warn("gateway: notifications are not relayed to the centre: this hub's store is shared by the registry's hubs (a gateway relays a store of its own)", "store", h.store.Where())
	case h.store != nil:
		// Its devices' notifications go to the centre's store too; a device revoked here
		// keeps its own here (the centre may have removed it).
		uc.Telemetry = h.store
		// The store is relayed from now on: its retention counts what it deletes before
		// the centre got it, even before the first session (the mark persisted by the
		// last run, or 0).
		if err := h.store.SetRelayedUpTo(ctx, 0, false); err != nil {
			return err
		}
		uc.RelayDevice = func(device string) bool {
			d, ok := h.devices.Load().Device(device)
			return ok && !d.Revoked
		}
	}
	up, err := uplink.New(uc)
	if err != nil {
		return err
	}
	if uc.Telemetry != nil && h.metrics != nil {
		if err := h.relayMetrics(up); err != nil {
			return err
		}
	}
	h.uplink.Store(up)
	go func() {
		if err := up.Run(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("upstream stopped; local devices keep working", "err", err)
		}
	}()
	h.log.Info("gateway: relaying devices to the centre", "centre", u.Hub, "as", u.Name, "key", ssh.FingerprintSHA256(signer.PublicKey()))
	return nil
}

// relayBehind is how many ids of the store lie past the relay's mark (0 if unknown).
func (h *Hub) relayBehind(mark int64) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	last, err := h.store.LastID(ctx)
	if err != nil {
		return 0
	}
	return max(last-mark, 0)
}

// relayMetrics registers the relay's gauges and counters (with metrics on).
func (h *Hub) relayMetrics(up *uplink.Uplink) error {
	relay := func(f func(r *uplink.RelayStatus) float64) func() float64 {
		return func() float64 {
			if r := up.Status().Relay; r != nil {
				return f(r)
			}
			return 0
		}
	}
	return h.metrics.Register(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_relay_mark", Help: "The last id of this gateway's notification store the centre holds."},
			relay(func(r *uplink.RelayStatus) float64 { return float64(r.Mark) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "iotsafe_relay_behind", Help: "Ids of this gateway's store past the centre's mark: an upper bound of the notifications not yet relayed."},
			relay(func(r *uplink.RelayStatus) float64 { return float64(h.relayBehind(r.Mark)) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "iotsafe_relay_stored_total", Help: "Notifications the centre stored from this gateway's relay since the hub started."},
			relay(func(r *uplink.RelayStatus) float64 { return float64(r.Relayed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "iotsafe_relay_refused_total", Help: "Relayed notifications the centre refused (they stay here) since the hub started."},
			relay(func(r *uplink.RelayStatus) float64 { return float64(r.Refused) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "iotsafe_relay_lost_total", Help: "Notifications this gateway's retention deleted before the centre got them, since the hub started."},
			func() float64 { return float64(h.store.UnrelayedDeleted()) }),
	)
}

// relayChanged tells the uplink what a device serves changed (sshd.Config.Relay).
func (h *Hub) relayChanged(device string) {
	if up := h.uplink.Load(); up != nil {
		up.Changed(device)
	}
}

// revokedUpstream revokes here a device the centre revoked or removed, so it stays out
// of the gateway too (and across its restarts).
func (h *Hub) revokedUpstream(device, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := h.control.Revoke(ctx, device, "revoked "+reason)
	if err != nil {
		h.log.Error("revoking a device the centre revoked failed", "device", device, "err", err)
		return
	}
	h.log.Warn("device revoked by the centre", "device", device, "reason", reason, "closed", n)
}

// upstreamInfo is the uplink's state for iotsafe status; nil without an upstream.
func (h *Hub) upstreamInfo() *admin.UpstreamInfo {
	up := h.uplink.Load()
	if up == nil {
		return nil
	}
	st := up.Status()
	info := &admin.UpstreamInfo{Hub: st.Hub, Name: h.cfg.Upstream.Name, State: st.State, Announced: st.Announced,
		Refused: st.Refused, Reconnects: st.Reconnects, LastError: st.LastError}
	if r := st.Relay; r != nil {
		info.Relay = &admin.RelayInfo{State: r.State, Relayed: r.Relayed, Duplicates: r.Duplicates, Refused: r.Refused, Mark: r.Mark,
			Behind: h.relayBehind(r.Mark), Lost: h.store.UnrelayedDeleted(), LastError: r.LastError}
	}
	return info
}
