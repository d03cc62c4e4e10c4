package resolver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/iotsafe/iotsafe/internal/acceptor"
	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/firewall"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// SocketName is the resolver socket inside the data folder.
const SocketName = "resolver.sock"

// Enforcer decides whether a caller may learn device/alias (access.Enforcer); a refusal
// is audited there.
type Enforcer interface {
	Check(caller access.Identity, device, alias, op string) error
}

// Devices finds a device's protected sockets (the registry).
type Devices interface {
	Device(ctx context.Context, name string) (*registry.Device, error)
}

// Server serves resolution queries.
type Server struct {
	ln      net.Listener
	enf     Enforcer
	devices Devices
	ids     *access.Identities
	log     *slog.Logger
}

// MaxConnsPerUID bounds the resolver connections one local user holds at once: the
// socket is world-writable, and one user must not take every descriptor of the hub.
const MaxConnsPerUID = 64

// Listen creates the socket at path, reachable by every local user (mode 0666): who may
// learn what is decided per request from the caller's kernel credentials.
func Listen(path string, enf Enforcer, devices Devices, ids *access.Identities, log *slog.Logger) (*Server, error) {
	if ids == nil {
		ids = access.NewIdentities(0)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("resolver: listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("resolver: chmod %s: %w", path, err)
	}
	s := &Server{ln: ln, enf: enf, devices: devices, ids: ids, log: log}
	go acceptor.Serve(ln, acceptor.Config{Name: "resolver", Peer: peerUID, PerPeer: MaxConnsPerUID, Logger: log},
		func(c net.Conn) { s.handle(c.(*net.UnixConn)) })
	return s, nil
}

// peerUID names a Unix-socket client by its kernel-reported uid.
func peerUID(c net.Conn) string {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ""
	}
	cred, err := firewall.UnixPeerCred(uc)
	if err != nil || cred == nil {
		return "unknown"
	}
	return "uid " + strconv.Itoa(int(cred.Uid))
}

// Close stops serving.
func (s *Server) Close() error { return s.ln.Close() }

func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	cred, err := firewall.UnixPeerCred(c)
	if err != nil {
		return
	}
	caller := s.ids.LookupProcess(cred.Uid, cred.Gid, cred.Pid)
	r := bufio.NewReaderSize(io.LimitReader(c, 64*MaxLine), MaxLine)
	for {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			io.WriteString(c, formatAnswer("", &Error{Code: CodeBadRequest, Msg: fmt.Sprintf("request longer than %d bytes", MaxLine)}))
			return
		}
		if err != nil {
			return
		}
		req, perr := ParseRequest(string(line[:len(line)-1]))
		var ans string
		if perr != nil {
			ans = formatAnswer("", &Error{Code: CodeBadRequest, Msg: perr.Error()})
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			addr, err := s.resolve(ctx, caller, req.Device, req.Alias)
			cancel()
			ans = formatAnswer(addr, err)
		}
		if _, err := io.WriteString(c, ans); err != nil {
			return
		}
	}
}

// resolve answers one request of a caller the kernel identified: the grants first, so a
// refused caller learns nothing, not even whether the device exists.
func (s *Server) resolve(ctx context.Context, caller access.Identity, device, alias string) (string, error) {
	if err := s.enf.Check(caller, device, alias, "resolve"); err != nil {
		return "", &Error{Code: CodeDenied, Msg: err.Error()}
	}
	d, err := s.devices.Device(ctx, device)
	if errors.Is(err, registry.ErrNotFound) {
		return "", &Error{Code: CodeNotFound, Msg: fmt.Sprintf("no device %s", device)}
	}
	if err != nil {
		return "", err
	}
	// A revoked device's sockets lead nowhere: say why, rather than let the caller's
	// connection fail as if the device were only offline.
	if d.Revoked() {
		return "", &Error{Code: CodeUnavailable, Msg: fmt.Sprintf("device %s is revoked (since %s): its services are closed until an operator reinstates it ('iotsafe device reinstate %s')",
			device, d.RevokedAt.Local().Format(time.DateTime), device)}
	}
	for _, so := range d.Sockets {
		if so.Alias == alias {
			return so.Addr.String(), nil
		}
	}
	return "", &Error{Code: CodeNotFound, Msg: fmt.Sprintf("device %s has no service %s", device, alias)}
}

// Resolve asks the hub's resolver at path for device/alias.
func Resolve(path, device, alias string) (string, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("resolver: hub not running (%s): %w", path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := fmt.Fprintf(c, "RESOLVE %s %s\n", device, alias); err != nil {
		return "", fmt.Errorf("resolver: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("resolver: no answer: %w", err)
	}
	return parseAnswer(line)
}
