package hub

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/iotsafe/iotsafe/internal/deviceplain"
	"github.com/iotsafe/iotsafe/internal/mqttbroker"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/transport"
	"github.com/iotsafe/iotsafe/internal/wsapi"
)

// transportEntry is one device transport the hub may run: its section's switch and how
// to open it. Adding a transport is its package, its config section (config.go) and one
// entry here.
type transportEntry struct {
	name string
	on   func(Config) bool
	open func(Config, transport.Deps) (transport.Transport, error)
}

// deviceTransports are the device transports in start order.
var deviceTransports = []transportEntry{
	{name: "soap", on: func(c Config) bool { return c.SOAP.Enabled },
		open: func(c Config, d transport.Deps) (transport.Transport, error) { return soap.Open(c.SOAP, d) }},
	{name: "mqtt", on: func(c Config) bool { return c.MQTT.Enabled() },
		open: func(c Config, d transport.Deps) (transport.Transport, error) { return mqttbroker.Open(c.MQTT, d) }},
	// DeviceHive's WebSocket API goes wherever the REST API is.
	{name: "websocket", on: func(c Config) bool { return c.WebSocket.On() && c.restServed() },
		open: func(c Config, d transport.Deps) (transport.Transport, error) {
			return wsapi.Open(c.WebSocket, c.Frontdoor.Enabled() && c.REST.OnFrontdoor(), d)
		}},
}

// anyTransport reports whether cfg turns on a device transport.
func anyTransport(cfg Config) bool {
	for _, e := range deviceTransports {
		if e.on(cfg) {
			return true
		}
	}
	return false
}

// transports are the running device transports, in start order.
type transports struct {
	mu   sync.Mutex
	list []transport.Transport
}

func (t *transports) add(tr transport.Transport) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.list = append(t.list, tr)
}

func (t *transports) all() []transport.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]transport.Transport(nil), t.list...)
}

// startTransports opens each device transport that is on, with what it needs of the hub
// and nothing else (transport.Deps).
func (h *Hub) startTransports(context.Context) error {
	if h.store == nil {
		return nil
	}
	for _, e := range deviceTransports {
		if !e.on(h.cfg) {
			continue
		}
		t, err := e.open(h.cfg, h.transportDeps(e.name))
		if err != nil {
			return fmt.Errorf("hub: %w", err) // a transport's errors name it
		}
		h.transports.add(t)
		if b, ok := t.(*mqttbroker.Broker); ok {
			h.mqtt.Store(b) // iotsafe mqtt status and clients; its removals mark (mqtt.go)
			h.forgetMissedMQTTRemovals(context.Background(), b)
		}
	}
	return nil
}

// transportDeps are what a transport named name gets.
func (h *Hub) transportDeps(name string) transport.Deps {
	d := transport.Deps{DataDir: h.dir, Devices: h.devices, Store: h.store, Audit: h.guard,
		// One count per device, whichever path it broke.
		Violation: func(device, detail, remote string) { h.ssh.Violation(device, detail, remote) },
		Log:       h.log.With("component", name), Sessions: &h.services}
	if h.metrics != nil {
		d.Metrics = h.metrics
	}
	if h.plain != nil {
		d.Plain = h.plain
	}
	if h.front != nil {
		d.Front, d.Domain = h.front, h.cfg.Frontdoor.Domain
		d.FrontdoorTLS = &transport.FrontdoorTLS{GetCertificate: h.front.GetCertificate}
		if ca := h.front.CA(); ca != nil {
			d.FrontdoorTLS.ClientCAs = ca.Pool()
		}
	}
	if h.accounts != nil {
		d.Accounts = platform{h}
	}
	if h.api != nil {
		d.DeviceHive = h.api
	}
	return d
}

// closeTransports closes the transports in reverse start order.
func (h *Hub) closeTransports() {
	ts := h.transports.all()
	for i := len(ts) - 1; i >= 0; i-- {
		if err := ts[i].Close(); err != nil {
			h.log.Warn("closing a device transport", "err", err)
		}
	}
}

// devicesChanged tells the transports that watch the device directory that it was
// reloaded.
func (h *Hub) devicesChanged() {
	for _, t := range h.transports.all() {
		if w, ok := t.(transport.DeviceWatcher); ok {
			w.DevicesChanged()
		}
	}
}

// startPlain binds the hub's plain device listener (rest.listen), where the REST API
// mounts here and the HTTP transports in their open functions; it serves from
// startServing on.
func (h *Hub) startPlain(context.Context) (err error) {
	if h.store == nil || h.cfg.REST.Listen == "" {
		return nil
	}
	log := h.log.With("component", "rest")
	if h.plain, err = deviceplain.Listen(h.cfg.REST.Listen, log); err != nil {
		return err
	}
	h.services.Add(h.plain.Session())
	h.plain.Mount(restapi.Prefix+"/", h.api)
	log.Info("REST API for devices on their SSH session", "listen", h.plain.Addr().String(), "path", restapi.Prefix)
	return nil
}

func (h *Hub) closePlain() {
	if h.plain != nil {
		h.services.Remove(h.plain.Session())
		h.plain.Close()
	}
}

// startServing serves the HTTP listeners, once every path is mounted on them.
func (h *Hub) startServing(context.Context) error {
	if h.front != nil {
		go func() {
			if err := h.front.Serve(); err != nil {
				h.log.Error("front door stopped", "err", err)
			}
		}()
	}
	if h.plain != nil {
		go func() {
			if err := h.plain.Serve(); err != nil {
				h.log.Error("plain device listener stopped", "err", err)
			}
		}()
	}
	return nil
}

// Listeners are every address the hub listens on, in a stable order: SSH, the front
// door, the plain device listener, the transports' own, metrics.
func (h *Hub) Listeners() []transport.Listener {
	var out []transport.Listener
	add := func(l transport.Listener) {
		if l.Addr != nil {
			out = append(out, l)
		}
	}
	add(transport.Listener{Role: "ssh", Addr: h.sshAddr, Proto: "ssh"})
	if h.front != nil && h.frontAt != nil {
		host := "DEVICE." + h.cfg.Frontdoor.Domain
		if _, port, err := net.SplitHostPort(h.frontAt.String()); err == nil && port != "443" {
			host += ":" + port
		}
		add(transport.Listener{Role: "frontdoor", Addr: h.frontAt, Proto: "https", ServerName: h.cfg.Frontdoor.Domain,
			Says: "front door on %s for https://" + host + "/ (local CA: 'iotsafe frontdoor ca')"})
	}
	if h.plain != nil {
		add(transport.Listener{Role: "rest", Addr: h.plain.Addr(), Proto: "http", Says: "REST API for devices on http://%s/api/rest (give devices a direct alias to it)"})
	}
	for _, t := range h.transports.all() {
		for _, l := range t.Listeners() {
			add(l)
		}
	}
	add(transport.Listener{Role: "metrics", Addr: h.metricsAt, Proto: "http", Says: "metrics on http://%s/metrics"})
	return out
}

// Listener is the address of the listener with role ("mqtt_tls"), nil when it is off.
func (h *Hub) Listener(role string) net.Addr {
	for _, l := range h.Listeners() {
		if l.Role == role {
			return l.Addr
		}
	}
	return nil
}
