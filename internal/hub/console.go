package hub

import (
	"context"

	"github.com/iotsafe/iotsafe/internal/console"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sshd"
)

// mountConsole puts the operator console on the front door's own host.
func (h *Hub) mountConsole() error {
	if !h.cfg.Frontdoor.ConsoleOn() {
		return nil
	}
	c, err := console.New(console.Deps{
		Registry: h.guard,
		Accounts: h.accounts,
		Policy:   h.Policy,
		Apply: func(ctx context.Context, ch control.Change) (control.Outcome, error) {
			return h.control.Apply(ctx, ch)
		},
		Sessions:  func(device string) []sshd.SessionInfo { return h.ssh.Sessions(device) },
		Health:    h.consoleHealth,
		Telemetry: consoleTelemetry(h),
		Crypto:    func() profile.CryptoPolicy { return h.cfg.SSH.Crypto },
		Log:       h.log.With("component", "console"),
	})
	if err != nil {
		return err
	}
	h.console = c
	h.front.Mount(console.Prefix, c)
	h.front.Mount("/console", c) // redirected to /console/
	h.log.Info("operator console on the front door", "url", "https://"+h.cfg.Frontdoor.Domain+console.Prefix)
	return nil
}

func (h *Hub) consoleHealth() console.Health {
	info := h.Info()
	_, degraded := h.RegistryState()
	return console.Health{Hub: h.cfg.HubName(), Listeners: info.Listeners, DataFreeMiB: info.DataFreeMiB,
		MinFreeMiB: int64(info.MinFreeMiB), Registry: degraded}
}

// consoleTelemetry is the telemetry store for the console, nil when the hub has none (an
// interface holding a nil *telemetry.Store is not nil).
func consoleTelemetry(h *Hub) console.Telemetry {
	if h.store == nil {
		return nil
	}
	return h.store
}
