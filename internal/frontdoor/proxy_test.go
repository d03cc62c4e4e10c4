package frontdoor

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// naiveDevice is the kind of device HTTP server the audit used: it answers every request
// line it sees, ignoring bodies, so a body that holds a request gets its own answer.
// It writes which connection (the client's port) served each path into seen.
func naiveDevice(t *testing.T, seen chan<- [2]string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				path := ""
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimRight(line, "\r\n")
					if f := strings.Fields(line); len(f) == 3 && strings.HasPrefix(f[2], "HTTP/") {
						path = f[1]
					} else if line == "" && path != "" {
						seen <- [2]string{c.RemoteAddr().String(), path}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(path))+"\r\n\r\n"+path)
						path = ""
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// Connections to devices are never shared between accounts: one account's request that
// a naive device misreads (a request smuggled in its body) can never answer another's.
func TestDeviceConnectionsAreNotSharedBetweenAccounts(t *testing.T) {
	seen := make(chan [2]string, 100)
	addr := naiveDevice(t, seen)
	tr := &perAccount{}
	do := func(id int64, method, path, body string) string {
		ctx := context.WithValue(context.Background(), routeKey{}, &route{who: principal{ID: id}})
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	const alice, carol = 1, 2
	for i := 0; i < 3; i++ {
		if got := do(alice, "GET", "/alice", ""); got != "/alice" {
			t.Fatalf("alice: %q", got)
		}
		if got := do(carol, "GET", "/carol", ""); got != "/carol" {
			t.Fatalf("carol: %q", got)
		}
	}
	conns := map[string]map[string]bool{}
	for i := 0; i < 6; i++ {
		s := <-seen
		if conns[s[0]] == nil {
			conns[s[0]] = map[string]bool{}
		}
		conns[s[0]][s[1]] = true
	}
	for c, paths := range conns {
		if len(paths) > 1 {
			t.Fatalf("connection %s carried requests of two accounts: %v", c, paths)
		}
	}
}

func TestSanitizeSetCookie(t *testing.T) {
	h := http.Header{}
	h.Add("Set-Cookie", SessionCookie+"=evil; Domain=devices.example.com; Path=/")
	h.Add("Set-Cookie", "__Host-iotsafe_x=1; Path=/; Secure")
	h.Add("Set-Cookie", "pref=dark; Domain=.devices.example.com; Path=/; HttpOnly")
	h.Add("Set-Cookie", "lang=en; Path=/")
	sanitizeSetCookie(h)
	got := h.Values("Set-Cookie")
	if len(got) != 2 || strings.Contains(strings.ToLower(strings.Join(got, "|")), "domain") ||
		!strings.HasPrefix(got[0], "pref=dark") || !strings.HasPrefix(got[1], "lang=en") {
		t.Fatalf("Set-Cookie after sanitizing: %q", got)
	}
}

func TestCrossOrigin(t *testing.T) {
	for _, tc := range []struct {
		method, site, origin string
		cross                bool
	}{
		{"GET", "cross-site", "https://evil.example", false},
		{"POST", "", "", false},
		{"POST", "same-origin", "https://dev1.devices.example.com", false},
		{"POST", "same-site", "https://dev2.devices.example.com", true},
		{"POST", "cross-site", "", true},
		{"DELETE", "", "https://dev2.devices.example.com", true},
		{"PUT", "", "https://dev1.devices.example.com", false},
		{"POST", "", "null", true},
	} {
		r, _ := http.NewRequest(tc.method, "https://dev1.devices.example.com/x", nil)
		r.Host = "dev1.devices.example.com"
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := crossOrigin(r); got != tc.cross {
			t.Errorf("%+v: cross-origin %v", tc, got)
		}
	}
}

// A device cannot set HSTS for the front door's names: its header is dropped (the front
// door sends its own).
func TestDeviceResponseDropsHSTS(t *testing.T) {
	resp := &http.Response{Header: http.Header{"Strict-Transport-Security": {"max-age=1; includeSubDomains"}, "X-Other": {"kept"}}}
	resp.Request = httptest.NewRequest("GET", "https://dev1.devices.test/", nil)
	if err := deviceResponse(resp); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Strict-Transport-Security") != "" || resp.Header.Get("X-Other") != "kept" {
		t.Fatalf("headers after deviceResponse: %v", resp.Header)
	}
}
