package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Transport is a running device transport.
type Transport interface {
	// Listeners are the addresses it listens on itself, in a stable order; none for a
	// transport that only mounts HTTP paths.
	Listeners() []Listener
	// Close stops it; the hub calls it once, in reverse start order.
	Close() error
}

// DeviceWatcher is a Transport that acts when the device directory was reloaded (a
// device revoked, removed or enrolled again): its clients of such devices go at once.
type DeviceWatcher interface {
	DevicesChanged()
}

// Listener is one address a part of the hub listens on.
type Listener struct {
	// Role names it in the ready file and iotsafe status: "mqtt", "mqtt_tls".
	Role string
	Addr net.Addr
	// Proto is what a client speaks there: "http", "https", "mqtt", "mqtts", "ssh".
	// scan --hub scans the TLS ones and ssh.
	Proto string
	// ServerName is the name a TLS client checks ("" for none), for scan --hub.
	ServerName string
	// Says is the line `iotsafe hub` prints for it, with %s for the address.
	Says string
}

// Deps are what the hub hands a transport. Fields are nil when the part is off.
type Deps struct {
	DataDir string // the hub's data folder, for a transport's own files
	Devices *devicedir.Directory
	Store   *telemetry.Store
	Audit   Auditor
	// Violation counts a device's breach of its profile on the hub's one counter
	// (on_violation applies), whichever path it broke.
	Violation func(device, detail, remote string)
	Log       *slog.Logger // already carries the transport's component name
	Metrics   Registerer   // nil: metrics are off
	// Plain is the hub's plain device listener (rest.listen) and Front the front door:
	// where HTTP paths mount, each nil when off. On Plain, deviceplain.Device says which
	// device a request's connection proves.
	Plain, Front Mounter
	// Domain is the front door's domain ("" without it).
	Domain string
	// Sessions is sshd's table of in-process listeners: a transport's plain listener
	// registers its deviceconn.Listener there, and devices' direct forwards to that
	// address are handed over with their identity.
	Sessions *deviceconn.Services
	// FrontdoorTLS is the front door's certificate and CA, for a TLS listener of a
	// transport that has no certificate of its own; nil without the front door.
	FrontdoorTLS *FrontdoorTLS
	// Accounts lets platform apps log in as front-door accounts; nil without them.
	Accounts Accounts
	// DeviceHive is the REST API, for a transport that speaks its actions another way;
	// nil when it is off.
	DeviceHive DeviceHive
}

// Auditor records events in the registry's audit log.
type Auditor interface {
	AddEvent(ctx context.Context, e registry.Event) error
}

// Registerer takes a transport's metrics.
type Registerer interface {
	Register(cs ...prometheus.Collector) error
}

// Mounter serves an HTTP handler at a path (an http.ServeMux pattern on the plain
// listener, a path prefix on the front door). Mount before the hub serves, that is in
// the transport's open function.
type Mounter interface {
	Mount(pattern string, h http.Handler)
}

// FrontdoorTLS is what a TLS listener borrows from the front door: its certificate (the
// local CA's or the operator's) and, when the hub has a CA, the pool of device
// certificates it issued (iotsafe device cert).
type FrontdoorTLS struct {
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	ClientCAs      *x509.CertPool // nil: no local CA
}

// Accounts are the front door's accounts as a platform app logs in with them.
type Accounts interface {
	// CheckPassword verifies an account's password under the front door's failed-login
	// limits; stamp changes whenever the account's password does.
	CheckPassword(ctx context.Context, ip, name, password string) (id int64, account, stamp string, err error)
	// AllowedAccount reports whether account id holds right on device.
	AllowedAccount(id int64, device, right string) bool
	// AccountStamp is account id's current password stamp; ok is false when the account
	// is removed.
	AccountStamp(id int64) (stamp string, ok bool)
}
