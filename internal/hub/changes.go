package hub

import (
	"context"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
)

// live is the hub's side of every change (control.Live): sshd's sessions, the REST
// API's, MQTT's and SOAP's views of the devices, the access policy and the kernel's rules.
type live struct{ h *Hub }

func (l live) Close(device, fingerprint, why string) int {
	return l.h.ssh.KickKey(device, fingerprint, why)
}

func (l live) Refresh() { l.h.reloadTelemetry() }

func (l live) Reload(upTo int64) error {
	l.h.kickPorts() // a new device brings sockets, maybe on a new port
	if l.h.access.Current(upTo) {
		return nil // a reload since (the admin socket's) read past it
	}
	return l.h.reloadAccess()
}

func (l live) Forget(device string) {
	l.h.forgetNotifications(device)
	if m := l.h.metrics; m != nil {
		m.Forget(device)
	}
}

func (l live) CloseProfile(name, why string) int { return l.h.ssh.KickProfile(name, why) }

func (l live) CloseCA(fingerprint, why string) int { return l.h.ssh.KickCA(fingerprint, why) }

// Moved lets go of a session the device now has on another hub of the registry (it
// reconnected elsewhere), unless the device is back here.
func (l live) Moved(device, hub string) {
	h := l.h
	if hub == h.reg.Hub() || h.deviceIsHere(device) {
		return
	}
	if n := h.ssh.KickKey(device, "", "session moved to hub "+hub); n > 0 {
		h.log.Info("closed a session the device has now on another hub", "event", "session_moved_away", "device", device, "hub", hub, "closed", n)
	}
}

// Apply implements admin.Handler: every change an operator makes through the admin
// socket takes the hub's one change path.
func (h *Hub) Apply(ctx context.Context, ch control.Change) (control.Outcome, error) {
	return h.control.Apply(ctx, ch)
}

// Control is the hub's change path, for in-process callers (the demo, tests).
func (h *Hub) Control() *control.Control { return h.control }

// deviceIsHere reports whether the registry says this hub holds the device's session
// (it came back after a move the change feed is only now delivering).
func (h *Hub) deviceIsHere(device string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := h.reg.Device(ctx, device)
	return err == nil && d.Hub == h.reg.Hub()
}
