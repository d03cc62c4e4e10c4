package tlspolicy

import (
	"crypto/tls"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/fakeclock"
)

// resumes connects with Go's client and its session cache, reads the server's line (so
// a TLS 1.3 ticket is taken in) and reports whether the session was resumed.
func resumes(t *testing.T, addr string, cache tls.ClientSessionCache, version uint16) bool {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, MinVersion: version, MaxVersion: version})
	if err != nil {
		t.Fatalf("TLS %x: %v", version, err)
	}
	defer c.Close()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().DidResume
}

// A ticket resumes its session until its key's lifetime is up, across a rotation; after
// that, and with a ticket another listener sealed, the client gets a full handshake
// (not a failed connection). TLS 1.2 and 1.3.
func TestTicketKeysLifetime(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		clk := fakeclock.New(time.Unix(1e9, 0))
		c, err := Policy{}.Config()
		if err != nil {
			t.Fatal(err)
		}
		keys := newTicketKeys(time.Hour, clk.Now)
		keys.install(c)
		c.Time = clk.Now // Go stamps sessions with it
		addr := serveConfig(t, c)

		old := tls.NewLRUClientSessionCache(1)
		if resumes(t, addr, old, v) || !resumes(t, addr, old, v) {
			t.Fatalf("TLS %x: a second connection did not resume the first's session", v)
		}
		// Past half the lifetime a new key seals new tickets; the old one still opens.
		clk.Add(31 * time.Minute)
		fresh := tls.NewLRUClientSessionCache(1)
		resumes(t, addr, fresh, v)
		if !resumes(t, addr, fresh, v) {
			t.Fatalf("TLS %x: a ticket of the new key did not resume", v)
		}
		keys.mu.Lock()
		n := len(keys.keys)
		keys.mu.Unlock()
		if n != 2 {
			t.Fatalf("TLS %x: %d keys after a rotation, want 2", v, n)
		}
		// The first session, resumed again (its ticket now sealed by the new key).
		if !resumes(t, addr, old, v) {
			t.Fatalf("TLS %x: the first session did not resume within its lifetime", v)
		}
		// An hour since the first full handshake. TLS 1.2 resumes the same master
		// secret, so its session is done, though its last ticket's key lives on. A TLS
		// 1.3 resumption is a session of its own (a new secret, from a new key
		// exchange), whose ticket is young. The first key is gone.
		clk.Add(29 * time.Minute)
		if resumed := resumes(t, addr, old, v); resumed != (v == tls.VersionTLS13) {
			t.Fatalf("TLS %x: resumed %v an hour after the first full handshake", v, resumed)
		}
		if !resumes(t, addr, fresh, v) {
			t.Fatalf("TLS %x: the second session did not resume within its lifetime", v)
		}
		keys.mu.Lock()
		n = len(keys.keys)
		keys.mu.Unlock()
		if n != 1 {
			t.Fatalf("TLS %x: %d keys after the first's lifetime, want 1", v, n)
		}
		// Tickets of another listener (its own keys) give a full handshake.
		other := serve(t, Policy{})
		elsewhere := tls.NewLRUClientSessionCache(1)
		resumes(t, other, elsewhere, v)
		if !resumes(t, other, elsewhere, v) {
			t.Fatalf("TLS %x: no resumption at the other listener", v)
		}
		// The cache is keyed by server address: move the entry to this listener's.
		if s, ok := elsewhere.Get(other); ok {
			elsewhere.Put(addr, s)
		}
		if resumes(t, addr, elsewhere, v) {
			t.Fatalf("TLS %x: a ticket sealed by another listener's key resumed", v)
		}
	}
}

// A forged or cut ticket opens nothing and fails nothing.
func TestTicketKeysRefuseForgeries(t *testing.T) {
	keys := newTicketKeys(time.Hour, time.Now)
	ss, err := tls.ParseSessionState(validState(t))
	if err != nil {
		t.Fatal(err)
	}
	ticket, err := keys.wrap(tls.ConnectionState{}, ss)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := keys.unwrap(ticket, tls.ConnectionState{}); err != nil || got == nil {
		t.Fatalf("own ticket: %v %v", got, err)
	}
	for name, id := range map[string][]byte{
		"empty":    nil,
		"cut":      ticket[:ticketIDLen+4],
		"flipped":  append(append([]byte{}, ticket[:len(ticket)-1]...), ticket[len(ticket)-1]^1),
		"other id": append([]byte("00000000"), ticket[ticketIDLen:]...),
	} {
		if got, err := keys.unwrap(id, tls.ConnectionState{}); err != nil || got != nil {
			t.Errorf("%s ticket: %v %v, want nothing and no error", name, got, err)
		}
	}
}

// validState is a real session state, as a server seals it: from a Go handshake.
func validState(t *testing.T) []byte {
	t.Helper()
	c, err := Policy{}.Config()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	c.WrapSession = func(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		b, err := ss.Bytes()
		select {
		case got <- b:
		default:
		}
		return b, err
	}
	resumes(t, serveConfig(t, c), tls.NewLRUClientSessionCache(1), tls.VersionTLS12)
	return <-got
}

// OpenSSL resumes sessions from the hub's tickets (TLS 1.2 and 1.3).
func TestOpenSSLResumesWithOurTickets(t *testing.T) {
	addr := serve(t, Policy{})
	for _, v := range []string{"-tls1_2", "-tls1_3"} {
		sess := filepath.Join(t.TempDir(), "sess.pem")
		run := func(args ...string) string {
			cmd := exec.Command("openssl", append([]string{"s_client", "-connect", addr, v}, args...)...)
			cmd.Stdin = strings.NewReader("")
			out, _ := cmd.CombinedOutput()
			return string(out)
		}
		if out := run("-sess_out", sess); !strings.Contains(out, "New, TLS") {
			t.Fatalf("%s first connection:\n%s", v, out)
		}
		if out := run("-sess_in", sess); !strings.Contains(out, "Reused, TLS") {
			t.Fatalf("%s: OpenSSL did not resume with the hub's ticket:\n%s", v, out)
		}
	}
}
