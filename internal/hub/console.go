package hub

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io/fs"
	"time"

	"context"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/console"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshd"
)

// mountConsole puts the operator console on the front door's own host.
func (h *Hub) mountConsole() error {
	if !h.cfg.Frontdoor.ConsoleOn() {
		return nil
	}
	key, err := consoleCSRFKey(h.reg)
	if err != nil {
		return err
	}
	c, err := console.New(console.Deps{
		CSRFKey:  key,
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

// consoleCSRFKey is the console's CSRF key, kept in the registry (made by the first hub
// that needs it) so every hub of the registry takes the forms of the others.
func consoleCSRFKey(reg *registry.Registry) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secret := reg.SharedSecret(registry.KeyConsoleCSRF)
	for range 2 {
		b, err := secret.Read(ctx)
		if err == nil {
			return hex.DecodeString(string(b))
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		err = secret.Create(ctx, []byte(hex.EncodeToString(key)))
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		// Another hub made it first: read theirs.
	}
	return nil, errors.New("hub: the console's CSRF key could not be read or made")
}
