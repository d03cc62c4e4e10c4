package jwtbench

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The simulator's HTTP/1.1 reads what Go's server sends: sized, chunked and empty
// bodies, keep-alive and close, over one connection.
func TestReadAnswerFromNetHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":1}`))
		case "/chunked":
			w.WriteHeader(http.StatusCreated)
			w.Write(bytes.Repeat([]byte("x"), 5000))
			w.(http.Flusher).Flush()
			w.Write([]byte("end"))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/close":
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("busy"))
		}
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var buf []byte
	for _, want := range []struct {
		path    string
		code    int
		body    string
		closing bool
	}{{"/small", 201, `{"id":1}`, false}, {"/chunked", 201, strings.Repeat("x", 5000) + "end", false}, {"/empty", 204, "", false},
		{"/small", 201, `{"id":1}`, false}, {"/close", 503, "busy", true}} {
		if _, err := c.Write(appendRequest(nil, want.path, "lab", "tok", false, []byte(`{}`))); err != nil {
			t.Fatal(err)
		}
		code, body, closing, err := readAnswer(br, buf)
		if err != nil || code != want.code || string(body) != want.body || closing != want.closing {
			t.Fatalf("%s: %d %q close=%v %v", want.path, code, body, closing, err)
		}
		buf = body
	}
}

// FuzzReadAnswer: any bytes give an answer or an error, never a panic or a body over
// the bound.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 503 x\r\n\r\nbusy"))
	f.Fuzz(func(t *testing.T, b []byte) {
		code, body, _, err := readAnswer(bufio.NewReader(bytes.NewReader(b)), nil)
		if err == nil && (code < 100 || len(body) > maxAnswer) {
			t.Fatalf("code %d, %d bytes", code, len(body))
		}
	})
}
