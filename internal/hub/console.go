package hub

import (
	"crypto/tls"
	"crypto/x509"
	"time"

	"context"

	"golang.org/x/crypto/ssh"

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
	hl := console.Health{Hub: h.cfg.HubName(), Listeners: info.Listeners, DataFreeMiB: info.DataFreeMiB,
		MinFreeMiB: int64(info.MinFreeMiB), Registry: degraded}
	if h.front != nil {
		if c, err := h.front.GetCertificate(&tls.ClientHelloInfo{ServerName: h.cfg.Frontdoor.Domain}); err == nil && c != nil && len(c.Certificate) > 0 {
			if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
				hl.Certs = append(hl.Certs, console.CertExpiry{What: "Front door certificate (" + h.cfg.Frontdoor.Domain + ")", NotAfter: leaf.NotAfter})
			}
		}
	}
	if set := h.hostKeySet.Load(); set != nil {
		for _, c := range set.Certificates {
			if c.ValidBefore != ssh.CertTimeInfinity {
				hl.Certs = append(hl.Certs, console.CertExpiry{What: "SSH host certificate (" + c.Key.Type() + ")", NotAfter: time.Unix(int64(min(c.ValidBefore, 1<<62)), 0)})
			}
		}
	}
	return hl
}

// consoleTelemetry is the telemetry store for the console, nil when the hub has none (an
// interface holding a nil *telemetry.Store is not nil).
func consoleTelemetry(h *Hub) console.Telemetry {
	if h.store == nil {
		return nil
	}
	return h.store
}
