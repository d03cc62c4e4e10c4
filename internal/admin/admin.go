package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/firewall"
	"github.com/iotsafe/iotsafe/internal/mqttbridge"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// SocketName is the admin socket inside the data folder.
const SocketName = "admin.sock"

// Operations.
const (
	OpPing = "ping"
	// OpChange applies a change (Request.Change) through the hub's change path
	// (internal/control): the registry, then every live subsystem.
	OpChange = "change"
	OpStatus = "status" // which devices are online, and the hub's own state
	// OpInfo is OpStatus without the list of online devices (a count instead): what
	// 'iotsafe status' and monitoring need, cheap at 100,000 devices.
	OpInfo = "info"
	// OpMQTTClients lists the broker's connected clients (of Request.Device, if set).
	OpMQTTClients = "mqtt-clients"
	// OpReloadHostKeys has the hub read its next and retired host keys again (iotsafe
	// hostkey add and drop) and tell live sessions of a new next key.
	OpReloadHostKeys = "reload-host-keys"
)

// Request is one admin call.
type Request struct {
	Op     string            `json:"op"`
	Device string            `json:"device,omitempty"` // mqtt-clients: of this device only
	Change *control.Envelope `json:"change,omitempty"`
}

// Reply answers a Request.
type Reply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Outcome is what a change did.
	Outcome *control.Outcome `json:"outcome,omitempty"`
	Online  map[string]bool  `json:"online,omitempty"`
	// Status: revocations the hub holds in memory (device -> reason) and, when the
	// registry cannot write, what the hub is holding.
	// NotFound: the change failed because its subject does not exist (registry.ErrNotFound).
	NotFound bool              `json:"not_found,omitempty"`
	Held     map[string]string `json:"held,omitempty"`
	Degraded string            `json:"degraded,omitempty"`
	// Hub is the status op's view of the hub itself (iotsafe status).
	Hub *HubInfo `json:"hub,omitempty"`
	// MQTTClients answers OpMQTTClients.
	MQTTClients []MQTTClient `json:"mqtt_clients,omitempty"`
}

// MQTTClient is one client connected to the hub's broker (iotsafe mqtt clients).
type MQTTClient struct {
	ClientID string `json:"client_id"`
	Device   string `json:"device,omitempty"`
	Account  string `json:"account,omitempty"` // a platform app's front-door account
	Listener string `json:"listener"`          // plain (over the device's SSH session) or tls
	Remote   string `json:"remote"`
	MQTT     string `json:"mqtt"` // 3.1, 3.1.1 or 5
	// TLS is the connection's version and suite, and "client certificate" when the
	// client logged in with one; "" on the plain listener.
	TLS           string    `json:"tls,omitempty"`
	Since         time.Time `json:"since"`
	Persistent    bool      `json:"persistent_session"`
	Subscriptions int       `json:"subscriptions"`
	Inflight      int       `json:"inflight"`
}

// Endpoint is one listener of a running hub.
type Endpoint struct {
	Role       string `json:"role"`
	Addr       string `json:"addr"`
	Proto      string `json:"proto"`                 // http, https, mqtt, mqtts, ssh
	ServerName string `json:"server_name,omitempty"` // the name a TLS client checks
}

// HubInfo is what `iotsafe status` shows of a running hub.
type HubInfo struct {
	Version string    `json:"version"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Listeners maps a listener's role (ssh, frontdoor, rest, metrics, and each device
	// transport's: mqtt, mqtt_tls) to its address.
	Listeners map[string]string `json:"listeners"`
	// Endpoints are the same listeners with what a client speaks there, for scan --hub.
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	Sessions  int        `json:"sessions"` // device sessions open
	Online    int        `json:"online"`   // devices with a live session
	// Forwards open hub-wide and the most the memory budget allows.
	Forwards     int64 `json:"forwards"`
	ForwardLimit int64 `json:"forward_limit"`
	// DataFreeMiB is the free space of the data folder's filesystem (-1: unknown);
	// MinFreeMiB is audit.min_free_mib, below which enrolments stop.
	DataFreeMiB int64 `json:"data_free_mib"`
	MinFreeMiB  int   `json:"min_free_mib"`
	// Access is which layers protect the protected sockets: the kernel's (nftables) and
	// the user-space check, and why the kernel's is off if it is.
	Access *AccessInfo `json:"access,omitempty"`
	// ConfigFile is the absolute path of the hub.yaml the hub read ('' for defaults).
	ConfigFile string `json:"config_file,omitempty"`
	// ReadyFile is the absolute path of the hub's --ready-file, if it writes one.
	ReadyFile string `json:"ready_file,omitempty"`
	// MQTT is the broker's state; nil when it is off.
	MQTT *MQTTInfo `json:"mqtt,omitempty"`
	// Upstream is a gateway's session to its centre; nil when the hub has no upstream.
	Upstream *UpstreamInfo `json:"upstream,omitempty"`
}

// AccessInfo is the access layers in use.
type AccessInfo struct {
	Kernel    bool   `json:"kernel"`
	UserSpace bool   `json:"userspace"`
	KernelOff string `json:"kernel_off,omitempty"`
}

// UpstreamInfo is a gateway's uplink: the centre, the session's state (connected,
// connecting, waiting, stopped), the devices the centre serves and those it refused.
type UpstreamInfo struct {
	Hub        string `json:"hub"`
	Name       string `json:"name"`
	State      string `json:"state"`
	Announced  int    `json:"announced"`
	Refused    int    `json:"refused"`
	Reconnects int    `json:"reconnects"`
	LastError  string `json:"last_error,omitempty"`
	// Relay is the relay of the gateway's notifications to the centre's store; nil
	// without a telemetry path here.
	Relay *RelayInfo `json:"relay,omitempty"`
}

// RelayInfo is the state of a gateway's notification relay: what the centre stored of
// it, the duplicates it recognised and the notifications it refused, and Mark, the
// last id of the gateway's store the centre has.
type RelayInfo struct {
	State      string `json:"state"`
	Relayed    int64  `json:"relayed"`
	Duplicates int64  `json:"duplicates"`
	Refused    int64  `json:"refused"`
	Mark       int64  `json:"mark"`
	// Behind is how many ids of the gateway's store lie past the mark: an upper bound
	// of the notifications waiting to be relayed (ids of deleted ones count too).
	Behind int64 `json:"behind"`
	// Lost counts the notifications the gateway's retention deleted before the centre
	// got them, since the hub started.
	Lost      int64  `json:"lost"`
	LastError string `json:"last_error,omitempty"`
}

// MQTTInfo is what `iotsafe mqtt status` shows of the hub's broker.
type MQTTInfo struct {
	Clients       int64 `json:"clients"`
	SessionsAway  int64 `json:"sessions_away"`
	Subscriptions int64 `json:"subscriptions"`
	Retained      int64 `json:"retained"`
	Inflight      int64 `json:"inflight"`
	Received      int64 `json:"received"`
	Sent          int64 `json:"sent"`
	Stored        int64 `json:"stored"`
	AuthRefused   int64 `json:"auth_refused"`
	TopicRefused  int64 `json:"topic_refused"`
	NotBridged    int64 `json:"not_bridged"`
	// Bridge is the bridge to the central broker; nil without one.
	Bridge *mqttbridge.Status `json:"bridge,omitempty"`
}

// Handler executes requests inside the hub.
type Handler interface {
	// Apply takes a change through the hub's change path.
	Apply(ctx context.Context, ch control.Change) (control.Outcome, error)
	OnlineDevices() map[string]bool
	// RegistryState is what the hub holds because the registry cannot write: held
	// revocations and a description ("" when none).
	RegistryState() (held map[string]string, degraded string)
	// Info describes the running hub.
	Info() HubInfo
	// MQTTClients lists the broker's clients, of device if not ""; an error when the
	// broker is off.
	MQTTClients(device string) ([]MQTTClient, error)
	// ReloadHostKeys reads the hub's next and retired host keys again.
	ReloadHostKeys() error
}

// ErrHubNotRunning means no hub listens on the admin socket.
var ErrHubNotRunning = errors.New("admin: hub not running")

// maxRequest bounds what a client may send: a profile (up to profile.MaxSize of YAML,
// which JSON may escape to twice that) is the largest change.
const maxRequest = 2*profile.MaxSize + 64<<10

// Deadlines of one call: a change may wait for the registry's writer (SQLite waits up to a
// minute for a busy database), the other operations only read the hub's memory.
const (
	callTimeout   = 10 * time.Second
	changeTimeout = 90 * time.Second
)

// Server serves the admin socket.
type Server struct {
	ln     net.Listener
	h      Handler
	log    *slog.Logger
	gid    int // admin group allowed besides root and the hub's uid; -1 for none
	hubUID int
}

// Listen creates the socket at path, owner-only, or group-accessible for group.
func Listen(path, group string, h Handler, log *slog.Logger) (*Server, error) {
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("admin: admin.group %q: %w", group, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	// A stale socket from a crashed hub is removed only if nobody answers on it.
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("admin: another hub is already running on %s", path)
	}
	os.Remove(path)
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin: chown %s: %w", path, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin: chmod %s: %w", path, err)
		}
	}
	s := &Server{ln: ln, h: h, log: log, gid: gid, hubUID: os.Getuid()}
	// No per-peer cap: only root, the hub's user and the admin group may connect, and an
	// operator's script may run hundreds of commands at once.
	go acceptor.Serve(ln, acceptor.Config{Name: "admin", Logger: log}, func(c net.Conn) { s.handle(c.(*net.UnixConn)) })
	return s, nil
}

// Close stops the server and removes the socket.
func (s *Server) Close() error { return s.ln.Close() }

// allowed checks the caller's kernel-reported credentials: the file mode already limits
// who can connect; this is the second lock.
func (s *Server) allowed(c *net.UnixConn) (*unix.Ucred, bool) {
	cred, err := firewall.UnixPeerCred(c)
	if err != nil || cred == nil {
		return nil, false
	}
	if cred.Uid == 0 || int(cred.Uid) == s.hubUID || s.gid >= 0 && int(cred.Gid) == s.gid {
		return cred, true
	}
	return cred, false
}

func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(callTimeout))
	enc := json.NewEncoder(c)
	cred, ok := s.allowed(c)
	if !ok {
		uid := -1
		if cred != nil {
			uid = int(cred.Uid)
		}
		s.log.Warn("admin request refused", "uid", uid)
		enc.Encode(Reply{Error: fmt.Sprintf("uid %d may not administer this hub", uid)})
		return
	}
	var req Request
	if err := json.NewDecoder(io.LimitReader(c, maxRequest)).Decode(&req); err != nil {
		enc.Encode(Reply{Error: "malformed request: " + err.Error()})
		return
	}
	if req.Op == OpChange {
		c.SetDeadline(time.Now().Add(changeTimeout))
	}
	enc.Encode(s.do(req, cred))
}

func (s *Server) do(req Request, cred *unix.Ucred) Reply {
	switch req.Op {
	case OpPing:
		return Reply{OK: true}
	case OpChange:
		return s.change(req, cred)
	case OpStatus, OpInfo:
		held, degraded := s.h.RegistryState()
		info := s.h.Info()
		rep := Reply{OK: true, Held: held, Degraded: degraded, Hub: &info}
		if req.Op == OpStatus {
			rep.Online = s.h.OnlineDevices()
		}
		return rep
	case OpMQTTClients:
		cls, err := s.h.MQTTClients(req.Device)
		if err != nil {
			return Reply{Error: err.Error()}
		}
		return Reply{OK: true, MQTTClients: cls}
	case OpReloadHostKeys:
		if err := s.h.ReloadHostKeys(); err != nil {
			return Reply{Error: err.Error()}
		}
		return Reply{OK: true}
	default:
		return Reply{Error: fmt.Sprintf("unknown op %q", req.Op)}
	}
}

// change applies a change; the log names it and its subject, never its fields (a change
// may carry a password hash or a key).
func (s *Server) change(req Request, cred *unix.Ucred) Reply {
	if req.Change == nil {
		return Reply{Error: "change: no change given"}
	}
	ch, err := control.Unwrap(*req.Change)
	if err != nil {
		return Reply{Error: err.Error()}
	}
	if err := s.mayChange(cred, ch); err != nil {
		s.log.Warn("admin change refused", "change", ch.Op(), "subject", ch.Subject(), "uid", cred.Uid)
		return Reply{Error: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), changeTimeout-5*time.Second)
	defer cancel()
	out, err := s.h.Apply(ctx, ch)
	if err != nil {
		s.log.Warn("admin change failed", "change", ch.Op(), "subject", ch.Subject(), "uid", cred.Uid, "err", err)
		return Reply{Error: err.Error(), Outcome: &out, NotFound: errors.Is(err, registry.ErrNotFound)}
	}
	s.log.Info("admin change", "change", ch.Op(), "subject", ch.Subject(), "closed", out.Closed, "uid", cred.Uid)
	held, degraded := s.h.RegistryState()
	return Reply{OK: true, Outcome: &out, Held: held, Degraded: degraded}
}

// mayChange keeps the admin group where it was before changes came through the socket:
// root and the hub's user own the registry and may make any change; the admin group may
// read the hub's state and revoke a device (stopping a device is what a fleet's on-call
// needs), not grant, enrol or create accounts.
func (s *Server) mayChange(cred *unix.Ucred, ch control.Change) error {
	if cred.Uid == 0 || int(cred.Uid) == s.hubUID {
		return nil
	}
	if _, ok := ch.(control.RevokeDevice); ok {
		return nil
	}
	return fmt.Errorf("uid %d may not %s: the admin group may revoke devices and read the hub's state; other changes need root or the hub's user", cred.Uid, ch.Op())
}

// Call sends one request to the hub listening on path.
func Call(path string, req Request) (Reply, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return Reply{}, fmt.Errorf("%w (%s): %v", ErrHubNotRunning, path, err)
	}
	defer c.Close()
	timeout := callTimeout
	if req.Op == OpChange {
		timeout = changeTimeout
	}
	c.SetDeadline(time.Now().Add(timeout))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return Reply{}, fmt.Errorf("admin: send: %w", err)
	}
	var rep Reply
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&rep); err != nil {
		return Reply{}, fmt.Errorf("admin: reply: %w", err)
	}
	if !rep.OK {
		return rep, fmt.Errorf("admin: hub says: %s", rep.Error)
	}
	return rep, nil
}
