package contain

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in two goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// broken is a nil func, as forward.open's release was on its error paths.
var broken func()

func countOf(component string) uint64 {
	for _, c := range Counts() {
		if c.Component == component {
			return c.Panics
		}
	}
	return 0
}

// A panicking connection goroutine ends like a returning one: its connection is
// closed, the panic is logged once with its stack as an error event, and counted.
func TestRecoverClosesTheConnectionLogsAndCounts(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	before := countOf("test socket") // the count is process-wide: -count=N runs add up
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer Recover(log, "test socket", a)
		broken() // the mistake of issue 56: a nil func called
	}()
	<-done
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection was not closed")
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("one JSON record, got %q: %v", buf.String(), err)
	}
	if rec["level"] != "ERROR" || rec["event"] != "panic" || rec["component"] != "test socket" ||
		!strings.Contains(rec["panic"].(string), "nil pointer") || !strings.Contains(rec["stack"].(string), "contain_test.go") {
		t.Fatalf("record %v", rec)
	}
	if n := countOf("test socket") - before; n != 1 {
		t.Fatalf("counted %d", n)
	}
	// A goroutine that returns normally is not counted.
	func() { defer Recover(log, "test socket", nil) }()
	if n := countOf("test socket") - before; n != 1 {
		t.Fatalf("counted %d after a normal return", n)
	}
}

// A panicking HTTP handler is counted and its connection aborted; the server goes on,
// and a handler's own http.ErrAbortHandler is not counted as a fault.
func TestHTTPContainsAPanic(t *testing.T) {
	var buf lockedBuffer // written by the server's goroutines, read here
	before := countOf("test http")
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	srv := httptest.NewServer(HTTP(log, "test http", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("a handler's bug")
		case "/abort":
			panic(http.ErrAbortHandler)
		default:
			w.Write([]byte("ok"))
		}
	})))
	srv.Config.ErrorLog = nil
	defer srv.Close()
	if _, err := http.Get(srv.URL + "/panic"); err == nil {
		t.Fatal("a panicking request got an answer")
	}
	if _, err := http.Get(srv.URL + "/abort"); err == nil {
		t.Fatal("an aborted request got an answer")
	}
	resp, err := http.Get(srv.URL + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the server stopped serving: %v", err)
	}
	resp.Body.Close()
	if n := countOf("test http") - before; n != 1 {
		t.Fatalf("counted %d, want the one panic", n)
	}
	if !strings.Contains(buf.String(), `"event":"panic"`) {
		t.Fatalf("log: %s", buf.String())
	}
}
