package frontdoor

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/iotsafe/iotsafe/internal/accessnote"
)

type accessKey struct{}

// accessEntry collects one request's access-log fields as the request is handled.
type accessEntry struct {
	start                 time.Time
	user, device, alias   string
	method, remote, proto string
	reason                string
	note                  *accessnote.Note // filled by a mounted handler (the REST API)
}

func (s *Server) logAccess(e *accessEntry, w *statusWriter) {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	switch s.limits.Load().AccessLog {
	case AccessLogOff:
		return
	case AccessLogErrors:
		if status < http.StatusBadRequest && e.reason == "" {
			return
		}
	}
	if e.note != nil {
		if e.user == "" {
			e.user = e.note.User
		}
		if e.device == "" {
			e.device = e.note.Device
		}
	}
	attrs := []any{"user", e.user, "device", e.device, "alias", e.alias, "method", e.method, "status", status,
		"bytes", w.bytes, "duration", time.Since(e.start).Round(time.Microsecond), "remote", e.remote, "proto", e.proto}
	if e.reason != "" {
		attrs = append(attrs, "reason", e.reason)
	}
	s.log.Info("access", attrs...)
}

// statusWriter records the status and body bytes; Unwrap lets http.ResponseController
// (used by the reverse proxy to flush and to hijack for WebSocket) reach the real writer.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack is found by the reverse proxy through Unwrap; this one exists for callers that
// type-assert http.Hijacker directly.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}
