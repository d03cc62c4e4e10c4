package hub

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/admin"
)

// Info implements admin.Handler: what `iotsafe status` shows of this hub.
func (h *Hub) Info() admin.HubInfo {
	sessions, forwards, limit := h.ssh.Load()
	info := admin.HubInfo{
		Version: h.version, PID: os.Getpid(), Started: h.upSince,
		Listeners: map[string]string{}, Sessions: sessions, Online: h.ssh.OnlineCount(), Forwards: forwards, ForwardLimit: limit,
		DataFreeMiB: FreeMiB(h.dir), MinFreeMiB: h.cfg.Audit.MinFreeMiB, ReadyFile: h.readyFile,
		ConfigFile: h.cfg.File,
	}
	for _, l := range h.Listeners() {
		info.Listeners[l.Role] = l.Addr.String()
		info.Endpoints = append(info.Endpoints, admin.Endpoint{Role: l.Role, Addr: l.Addr.String(), Proto: l.Proto, ServerName: l.ServerName})
	}
	if b := h.mqtt.Load(); b != nil {
		info.MQTT = b.Info()
	}
	info.Upstream = h.upstreamInfo()
	if h.access != nil {
		k, u, why := h.access.Layers()
		info.Access = &admin.AccessInfo{Kernel: k, UserSpace: u, KernelOff: why}
	}
	return info
}

// ServiceStatus is the hub's state in one line, for a service manager's status line
// (systemctl status): devices online, forwards, and whatever needs the operator.
func (h *Hub) ServiceStatus() string {
	info := h.Info()
	var b strings.Builder
	fmt.Fprintf(&b, "devices online: %d, forwarded connections: %d", info.Online, info.Forwards)
	if d := h.guard.Degraded(); d != nil {
		fmt.Fprintf(&b, "; DEGRADED: the registry cannot write since %s, holding %d revocations in memory",
			d.Since.Format(time.DateTime), d.Revocations)
	}
	if info.DataFreeMiB >= 0 && info.DataFreeMiB < int64(info.MinFreeMiB) {
		fmt.Fprintf(&b, "; data folder low: %d MiB free, enrolments stopped", info.DataFreeMiB)
	}
	if up := info.Upstream; up != nil {
		fmt.Fprintf(&b, "; upstream %s %s", up.Hub, up.State)
	}
	return b.String()
}

// MQTTClients implements admin.Handler: the broker's connected clients.
func (h *Hub) MQTTClients(device string) ([]admin.MQTTClient, error) {
	b := h.mqtt.Load()
	if b == nil {
		return nil, errors.New("the hub's MQTT broker is off: set mqtt.listen or mqtt.tls_listen in hub.yaml (docs/mqtt.md)")
	}
	return b.Clients(device), nil
}

// listeners are the hub's listening addresses by role (ssh, frontdoor, rest, metrics,
// and each transport's: mqtt, mqtt_tls), those that are on: one list for iotsafe status
// and the ready file.
func (h *Hub) listeners() map[string]net.Addr {
	out := map[string]net.Addr{}
	for _, l := range h.Listeners() {
		out[l.Role] = l.Addr
	}
	return out
}
