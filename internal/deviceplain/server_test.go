package deviceplain

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/deviceconn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// plainFixture is the listener on loopback with one mount that says which device the
// request proved, over a real registry with dev1.
type plainFixture struct {
	srv  *Server
	dev1 *registry.Device
	dir  *devicedir.Directory
}

func newPlainFixture(t *testing.T) *plainFixture {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.Open(ctx, t.TempDir(), sockets.Config{CIDR: "127.84.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	pub, _ := ssh.NewPublicKey(k.Public())
	f := &plainFixture{dir: devicedir.New(reg)}
	if f.dev1, err = reg.AddDevice(ctx, "dev1", "default", pub); err != nil {
		t.Fatal(err)
	}
	if err := f.dir.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if f.srv, err = Listen("127.0.0.1:0", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	f.srv.Mount("/who", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, via, ok := Device(r, f.dir.Load())
		fmt.Fprintf(w, "%s %s %v plain=%v", st.Name, via, ok, Plain(r))
	}))
	go f.srv.Serve()
	t.Cleanup(f.srv.Close)
	return f
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A connection handed over by a device's session proves that device, in the enrolment
// the session authenticated as only.
func TestSessionProvesItsDevice(t *testing.T) {
	f := newPlainFixture(t)
	st, _ := f.dir.Load().Device("dev1")
	via := func(id deviceconn.Identity) *http.Client {
		return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return f.srv.Session().Dial(ctx, id)
		}}}
	}
	id := deviceconn.Identity{Device: "dev1", Gen: st.Gen(), Address: f.dev1.Address}
	if _, got := get(t, via(id), "http://device/who"); got != "dev1 session true plain=true" {
		t.Fatalf("over dev1's session: %q", got)
	}
	id.Gen++ // an earlier enrolment of the same name
	if _, got := get(t, via(id), "http://device/who"); !strings.HasSuffix(got, "session false plain=true") {
		t.Fatalf("over a session of another enrolment of dev1: %q", got)
	}
}

// A TCP connection this process (the hub) opened from a device's pool address proves the
// device by that address; from an address no device holds, nothing.
func TestHubConnectionProvesByAddress(t *testing.T) {
	f := newPlainFixture(t)
	from := func(ip net.IP) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	url := "http://" + f.srv.Addr().String() + "/who"
	if _, got := get(t, from(f.dev1.Address.AsSlice()), url); got != "dev1 address true plain=true" {
		t.Fatalf("from dev1's pool address: %q", got)
	}
	if _, got := get(t, from(net.IPv4(127, 0, 0, 1)), url); got != " address false plain=true" {
		t.Fatalf("from 127.0.0.1: %q", got)
	}
}

// A request outside the plain listener proves nothing; a path nothing is mounted on gets
// 404 naming the paths there are; a listener off loopback is refused.
func TestPlainListenerEdges(t *testing.T) {
	f := newPlainFixture(t)
	r, _ := http.NewRequest("GET", "/who", nil)
	if _, _, ok := Device(r, f.dir.Load()); ok || Plain(r) {
		t.Fatal("a request of another listener proved a device")
	}
	code, body := get(t, http.DefaultClient, "http://"+f.srv.Addr().String()+"/elsewhere")
	if code != 404 || !strings.Contains(body, "/who") {
		t.Fatalf("an unmounted path: %d %q", code, body)
	}
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:80", "localhost:80", ""} {
		if _, err := Listen(addr, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Fatalf("Listen(%q): %v", addr, err)
		}
	}
}
