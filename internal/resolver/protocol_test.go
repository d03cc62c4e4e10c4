package resolver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// enforcer allows dev42 and dev44 and records who asked. The enforcer and the registry
// are stand-ins here (access and the hub's tests cover them with a real registry); the
// socket, the kernel's credentials and the protocol are real.
type enforcer struct{ seen access.Identity }

func (e *enforcer) Check(id access.Identity, device, alias, op string) error {
	e.seen = id
	if device == "dev42" || device == "dev44" {
		return nil
	}
	return errors.New("permission denied: " + id.String() + " may not reach " + device + "/" + alias)
}

type devices struct{}

func (devices) Device(_ context.Context, name string) (*registry.Device, error) {
	if name != "dev42" {
		return nil, registry.ErrNotFound
	}
	return &registry.Device{Name: name, Sockets: []registry.Socket{{Alias: "http", Addr: netip.MustParseAddrPort("127.77.0.42:10000")}}}, nil
}

func TestResolverRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	b := &enforcer{}
	s, err := Listen(path, b, devices{}, access.NewIdentities(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := Resolve(path, "dev42", "http")
	if err != nil || addr != "127.77.0.42:10000" {
		t.Fatalf("%q %v", addr, err)
	}
	if b.seen.Name == "" {
		t.Fatal("caller identity not taken from the kernel")
	}
	_, err = Resolve(path, "dev43", "http")
	var re *Error
	if !errors.As(err, &re) || re.Code != CodeDenied || !strings.Contains(re.Msg, "may not reach dev43/http") {
		t.Fatalf("denied: %v", err)
	}
	// Allowed, but no such service, or no such device: notfound, saying which.
	if _, err := Resolve(path, "dev42", "ssh"); !errors.As(err, &re) || re.Code != CodeNotFound || !strings.Contains(re.Msg, "has no service ssh") {
		t.Fatalf("unknown alias: %v", err)
	}
	if _, err := Resolve(path, "dev44", "http"); !errors.As(err, &re) || re.Code != CodeNotFound || !strings.Contains(re.Msg, "no device dev44") {
		t.Fatalf("unknown device: %v", err)
	}
	// Several requests on one connection, a malformed one among them, and an overlong line.
	c, _ := net.Dial("unix", path)
	defer c.Close()
	c.Write([]byte("RESOLVE dev42 http\nHELLO\nRESOLVE dev42 http\n" + strings.Repeat("x", 600) + "\n"))
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), "longer than") {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		got.Write(buf[:n])
	}
	lines := strings.Split(strings.TrimSpace(got.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "OK ") || !strings.HasPrefix(lines[1], "ERR badrequest unknown verb") ||
		!strings.HasPrefix(lines[2], "OK ") || !strings.HasPrefix(lines[3], "ERR badrequest request longer") {
		t.Fatalf("answers:\n%s", got.String())
	}
}

// FuzzParseRequest: no input panics; accepted requests are canonical and round-trip.
func FuzzParseRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseRequest(line)
		if err != nil {
			if ans := formatAnswer("", &Error{Code: CodeBadRequest, Msg: err.Error()}); strings.Count(ans, "\n") != 1 {
				t.Fatalf("error answer spans lines: %q", ans)
			}
			return
		}
		again, err := ParseRequest("RESOLVE " + r.Device + " " + r.Alias)
		if err != nil || again != r {
			t.Fatalf("%q -> %+v, again %+v %v", line, r, again, err)
		}
		if ans := formatAnswer("", &Error{Code: CodeDenied, Msg: line}); strings.Count(ans, "\n") != 1 {
			t.Fatalf("answer for %q spans lines: %q", line, ans)
		}
	})
}
