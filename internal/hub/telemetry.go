package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// openStore opens the notification store when a telemetry path is configured: the data
// folder's telemetry.db, or the shared PostgreSQL database, where every hub of the
// registry reads what any of them stored.
func (h *Hub) openStore(ctx context.Context) (err error) {
	if !h.cfg.TelemetryEnabled() {
		return nil
	}
	var obs *telemetry.Metrics
	if h.metrics != nil {
		obs = telemetry.NewMetrics()
	}
	if h.store, err = telemetry.Open(ctx, h.cfg.RegistryLocation(h.dir), h.cfg.Telemetry, telemetry.Options{Observer: observer(obs), Log: h.log.With("component", "telemetry")}); err != nil {
		return err
	}
	if err := h.applyMissedRemovals(ctx); err != nil {
		// Not a reason to stay down (a full disk): the next start tries again.
		h.log.Error("applying device removals the notification store had not seen failed; a removed device's notifications may show until the next start", "err", err)
	}
	if h.store.Shared() {
		h.log.Info("notification store shared by the registry's hubs", "component", "rest", "database", h.store.Where())
		h.warnLocalNotifications(ctx)
	}
	if h.metrics != nil {
		if err := h.metrics.Register(obs.Collectors(h.store)...); err != nil {
			return err
		}
	}
	// By age often, so each run deletes about a minute of notifications; by count
	// hourly, as finding the devices over the limit reads the whole device index.
	go h.pruneTelemetry(ctx, time.Minute, time.Hour)
	return nil
}

// startTelemetry builds what the telemetry paths share on the store: the token keys,
// one directory of device identities and the REST API (which the front door and the
// plain device listener mount; the other transports come in startTransports).
func (h *Hub) startTelemetry(ctx context.Context) error {
	if h.store == nil {
		return nil
	}
	log := h.log.With("component", "rest")
	keys, note, err := TokenKeys(ctx, &h.cfg, h.dir, h.reg)
	if err != nil {
		return fmt.Errorf("hub: jwt: %w", err)
	}
	if note != "" {
		log.Warn(note)
	}
	tokens, what, err := authn.OpenStore(ctx, keys, h.cfg.JWT)
	if err != nil {
		return fmt.Errorf("hub: jwt: %w", err)
	}
	kid, alg := tokens.CurrentKey()
	switch what {
	case authn.KeysCreated:
		log.Info("created the token signing key", "in", keys.Where(), "kid", kid, "algorithm", alg)
	case authn.KeysRotated:
		log.Warn("jwt.algorithm differs from the current key's: rotated to a new key; tokens of the old one stay valid until they expire", "kid", kid, "algorithm", alg)
	}
	if alg == authn.None {
		log.Warn("jwt.allow_unsigned is on and jwt.algorithm is none: tokens are unsigned and anyone can forge one; for measuring only")
	}
	var m *restapi.Metrics
	if h.metrics != nil {
		m = restapi.NewMetrics()
		if err := h.metrics.Register(m.Collectors()...); err != nil {
			return err
		}
	}
	h.devices = devicedir.New(h.guard)
	if err := h.devices.Reload(ctx); err != nil {
		return err
	}
	h.api = restapi.New(h.cfg.REST, h.guard, h.devices, h.store, h, tokens, m, log)
	return nil
}

// observer is m as a telemetry.Observer: nil (no metrics) stays an untyped nil.
func observer(m *telemetry.Metrics) telemetry.Observer {
	if m == nil {
		return nil
	}
	return m
}

// Store is the telemetry store (nil without a telemetry path), for in-process callers.
func (h *Hub) Store() *telemetry.Store { return h.store }

// mountREST puts the API on the front door.
func (h *Hub) mountREST() {
	if h.front == nil || h.api == nil || !h.cfg.REST.OnFrontdoor() {
		return
	}
	h.front.Mount(restapi.Prefix+"/", h.api)
	h.api.SetAccounts(h.accounts)
	h.log.Info("REST API on the front door", "url", "https://"+h.cfg.Frontdoor.Domain+restapi.Prefix+"/")
}

// reloadTelemetry refreshes the telemetry paths' device directory (a revoked or removed
// device's tokens and secrets stop at once).
func (h *Hub) reloadTelemetry() {
	if h.devices == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.devices.Reload(ctx); err != nil {
		h.log.Error("reloading the device directory of the telemetry paths failed", "err", err)
		return
	}
	h.devicesChanged() // a revoked or removed device's clients go now
	if h.mqtt.Load() != nil {
		h.markMQTTRemovals(ctx)
	}
}

// pruneTelemetry applies the store's retention until ctx ends: by age every ageEvery, by
// count per device every countEvery.
func (h *Hub) pruneTelemetry(ctx context.Context, ageEvery, countEvery time.Duration) {
	lastCount := time.Time{}
	var lost int64 // what retention deleted before a gateway's centre got it, so far
	for {
		now := time.Now()
		n, err := h.store.PruneAge(ctx, now)
		if err == nil && now.Sub(lastCount) >= countEvery {
			var m int64
			m, err = h.store.PruneCount(ctx)
			n += m
			lastCount = now
		}
		switch {
		case errors.Is(err, telemetry.ErrClosed) || ctx.Err() != nil:
			return
		case err != nil:
			h.log.Error("telemetry retention failed", "err", err)
		case n > 0:
			h.log.Info("telemetry retention", "deleted", n)
		}
		if now := h.store.UnrelayedDeleted(); now > lost {
			h.log.Warn("telemetry retention deleted notifications the centre had not got from this gateway: they are lost to it (raise telemetry.retention or telemetry.max_per_device, or bring the centre back sooner)",
				"lost", now-lost, "lost_since_start", now)
			lost = now
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(ageEvery):
		}
	}
}

// RevokeDevice implements restapi.Hub: a device blocked over REST takes the change path.
func (h *Hub) RevokeDevice(ctx context.Context, device, reason string) error {
	_, err := h.control.Apply(ctx, control.RevokeDevice{Device: device, Reason: reason})
	return err
}

// RegistryState implements admin.Handler.
func (h *Hub) RegistryState() (map[string]string, string) {
	if st := h.guard.Degraded(); st != nil {
		return h.guard.Held(), st.String()
	}
	return nil, ""
}

// RegisterDevice implements restapi.Hub: the device is enrolled as 'iotsafe device add'
// does, with the default profile, its groups and no SSH key yet.
func (h *Hub) RegisterDevice(ctx context.Context, device string, groups []string) error {
	_, err := h.control.Apply(ctx, control.AddDevice{Name: device, Profile: profile.DefaultName, Groups: groups})
	return err
}

// SetDeviceGroups implements restapi.Hub (a device moved to another network or type).
func (h *Hub) SetDeviceGroups(ctx context.Context, device string, groups []string) error {
	_, err := h.control.Apply(ctx, control.SetGroups{Device: device, Groups: groups})
	return err
}

// AddGroup implements restapi.Hub: a network or device type made empty.
func (h *Hub) AddGroup(ctx context.Context, kind, name, description string) (registry.GroupInfo, error) {
	out, err := h.control.Apply(ctx, control.AddGroupInfo{Kind: kind, Name: name, Description: description})
	if err != nil {
		return registry.GroupInfo{}, err
	}
	return *out.Group, nil
}

// RemoveGroup implements restapi.Hub.
func (h *Hub) RemoveGroup(ctx context.Context, group string) error {
	_, err := h.control.Apply(ctx, control.RemoveGroupInfo{Group: group})
	return err
}

// RemoveDevice implements restapi.Hub.
func (h *Hub) RemoveDevice(ctx context.Context, device string) error {
	_, err := h.control.Apply(ctx, control.RemoveDevice{Device: device})
	return err
}

// forgetNotifications hides a removed device's notifications from every reader at once;
// the store deletes them in the background (and goes on after a restart).
func (h *Hub) forgetNotifications(device string) {
	if h.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.store.RemoveDevice(ctx, device); err != nil {
		// The next start applies it (applyMissedRemovals).
		h.log.Error("forgetting a removed device's notifications failed; the hub's next start does it", "device", device, "err", err)
	}
}

// applyMissedRemovals forgets the notifications of devices removed while the store did
// not hear of it: by a command while no hub ran, or just before a crash. It reads the
// registry's removals after the last one the store applied. A device enrolled again
// since keeps what it stored after its removal.
func (h *Hub) applyMissedRemovals(ctx context.Context) error {
	after, err := h.store.RemovalsApplied(ctx)
	if err != nil {
		return err
	}
	applied := 0
	for {
		evs, err := h.reg.EventsAfter(ctx, registry.EventDeviceRemoved, after, 1000)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			_, err := h.reg.Device(ctx, e.Device)
			switch {
			case errors.Is(err, registry.ErrNotFound):
				err = h.store.RemoveDevice(ctx, e.Device)
			case err == nil:
				err = h.store.RemoveDeviceBefore(ctx, e.Device, e.At)
			}
			if err != nil {
				return err
			}
			applied++
		}
		after = evs[len(evs)-1].ID
		if err := h.store.SetRemovalsApplied(ctx, after); err != nil {
			return err
		}
	}
	if applied > 0 {
		h.log.Info("applied device removals the notification store had not seen", "removals", applied)
	}
	return nil
}

// warnLocalNotifications says so when the data folder still holds a telemetry.db of
// its own while the hub uses the shared store: its notifications are not lost, but no
// reader sees them until they are moved.
func (h *Hub) warnLocalNotifications(ctx context.Context) {
	n, err := telemetry.Count(ctx, h.dir)
	switch {
	case err != nil:
		h.log.Warn("could not read the data folder's own notification store", "file", telemetry.FileName, "err", err)
	case n > 0:
		h.log.Warn("the data folder's telemetry.db holds notifications the shared store lacks: readers see them only once moved (stop this hub, then: iotsafe registry migrate --notifications --from DATA --to DSN)",
			"file", telemetry.FileName, "notifications", n)
	}
}

// TokenKeys is where the REST API's token signing keys are: the data folder's
// jwt-keys.json, or, with a PostgreSQL registry, a setting of the registry that every
// hub of it shares (a token from one hub verifies at all). A folder's key file is moved
// into a registry that has no keys yet, so tokens it signed stay valid; a key file left
// beside keys the registry already has is not used, and note says so.
func TokenKeys(ctx context.Context, cfg *Config, dir string, reg *registry.Registry) (keys authn.KeyStore, note string, err error) {
	if cfg.Registry.DSN == "" {
		return authn.FileKeys(dir), "", nil
	}
	shared := reg.SharedSecret(registry.KeyJWT)
	local, err := authn.FileKeys(dir).Read(ctx)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return shared, "", nil
	case err != nil:
		return nil, "", err
	}
	err = shared.Create(ctx, local)
	switch {
	case err == nil:
		return shared, "", nil
	case !errors.Is(err, os.ErrExist):
		return nil, "", err
	}
	if cur, err := shared.Read(ctx); err != nil || !bytes.Equal(cur, local) {
		return shared, authn.FileKeys(dir).Where() + " is not used: the hubs of the registry share its signing keys, and tokens this file's keys signed are refused (remove the file once they have expired)", nil
	}
	return shared, "", nil
}
