package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/transport"
)

// socket is one client's connection: its reader runs the actions one at a time (a
// client that sends faster than the hub answers waits on TCP), each subscription
// follows the store on its own goroutine, and whichever has a message writes it at once
// (one at a time): no queue to bound, and no goroutine of its own to write. A client
// that does not take a message within write_timeout is closed.
type socket struct {
	s      *Server
	conn   *websocket.Conn
	base   *http.Request // the upgrade request: its context, address, host and TLS
	remote netip.Addr
	ctx    context.Context // ends when the socket closes
	cancel context.CancelFunc
	write  sync.Mutex // one writer at a time (gorilla's rule)

	mu       sync.Mutex
	caller   transport.DeviceHiveCaller // nil until it authenticates
	subs     map[int64]*subscription
	lastSub  int64
	once     sync.Once
	subsDone sync.WaitGroup
}

func newSocket(s *Server, conn *websocket.Conn, r *http.Request, remote netip.Addr, proven transport.DeviceHiveCaller) *socket {
	ctx, cancel := context.WithCancel(r.Context())
	return &socket{s: s, conn: conn, base: r, remote: remote, ctx: ctx, cancel: cancel,
		caller: proven, subs: map[int64]*subscription{}}
}

// who is the socket's caller, nil before it authenticates.
func (so *socket) who() transport.DeviceHiveCaller {
	so.mu.Lock()
	defer so.mu.Unlock()
	return so.caller
}

// serve reads and runs the client's messages until the socket closes, then gives back
// everything it held.
func (so *socket) serve() {
	defer func() {
		so.close(websocket.CloseNormalClosure, "")
		so.subsDone.Wait()
		so.s.release(so.remote, so.who(), false)
	}()
	so.conn.SetReadLimit(int64(so.s.cfg.MaxMessage))
	authDeadline := time.Now().Add(so.s.cfg.AuthTimeout)
	alive := func() {
		if so.who() != nil {
			so.conn.SetReadDeadline(time.Now().Add(2 * so.s.cfg.PingInterval))
		}
	}
	so.conn.SetPongHandler(func(string) error { alive(); return nil })
	if so.who() == nil {
		so.conn.SetReadDeadline(authDeadline)
	} else {
		alive()
	}
	for {
		kind, data, err := so.conn.ReadMessage()
		if err != nil {
			so.readFailed(err)
			return
		}
		alive()
		if kind != websocket.TextMessage && kind != websocket.BinaryMessage {
			continue
		}
		so.handleApart(data)
	}
}

// handleApart runs one action on a goroutine of its own and waits for it: the REST
// request it becomes grows a stack that then goes with it, where the reader's, which
// waits for the socket's next message as long as the socket is open, would keep it
// (some 10 KiB a socket, bench websocket).
func (so *socket) handleApart(data []byte) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer contain.Recover(so.s.log, "websocket action", so.conn)
		so.handle(data)
	}()
	<-done
}

// readFailed closes the socket with a reason its client can read, where there is one.
func (so *socket) readFailed(err error) {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout() && so.who() == nil:
		so.s.metrics.closed.WithLabelValues("auth_timeout").Inc()
		so.close(websocket.ClosePolicyViolation, "authenticate within "+so.s.cfg.AuthTimeout.String()+": {\"action\":\"authenticate\",\"token\":ACCESS_TOKEN}")
	case errors.As(err, &ne) && ne.Timeout():
		so.s.metrics.closed.WithLabelValues("silent").Inc()
	case errors.Is(err, websocket.ErrReadLimit):
		so.s.metrics.closed.WithLabelValues("too_large").Inc()
		so.close(websocket.CloseMessageTooBig, "a message is larger than websocket.max_message")
	default:
		so.s.metrics.closed.WithLabelValues("client").Inc()
	}
}

// ping asks the client for a pong (the server's ticker calls it for every socket); one
// that cannot be sent in time closes the socket.
func (so *socket) ping() {
	if err := so.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(so.s.cfg.WriteTimeout)); err != nil {
		so.close(websocket.CloseAbnormalClosure, "")
	}
}

// send writes m now; a client that does not take it within write_timeout does not read
// what it is sent and is closed rather than waited for.
func (so *socket) send(m []byte) bool {
	so.write.Lock()
	defer so.write.Unlock()
	if so.ctx.Err() != nil {
		return false
	}
	so.conn.SetWriteDeadline(time.Now().Add(so.s.cfg.WriteTimeout))
	err := so.conn.WriteMessage(websocket.TextMessage, m)
	if err == nil {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		name := "an unauthenticated client"
		if c := so.who(); c != nil {
			name = c.String()
		}
		so.s.log.Warn("socket closed: it does not read what it is sent", "caller", name, "remote", so.remote.String(), "write_timeout", so.s.cfg.WriteTimeout)
		so.s.metrics.closed.WithLabelValues("slow").Inc()
	}
	so.close(websocket.CloseAbnormalClosure, "")
	return false
}

// close sends a close frame with code and reason (none for CloseAbnormalClosure) and
// closes the connection; the reader then returns. Only the first call counts.
func (so *socket) close(code int, reason string) {
	so.once.Do(func() {
		so.cancel()
		if code != websocket.CloseAbnormalClosure {
			if len(reason) > 120 { // a close frame's reason is at most 123 bytes
				reason = reason[:120]
			}
			so.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
		}
		so.conn.Close()
	})
}

// setCaller makes c the socket's caller (after authenticate), or says why not. A
// socket that now speaks for another caller ends the subscriptions of the one before.
func (so *socket) setCaller(c transport.DeviceHiveCaller) string {
	so.mu.Lock()
	was := so.caller
	if why := so.s.authenticated(so.remote, was, c); why != "" {
		so.mu.Unlock()
		return why
	}
	so.caller = c
	so.mu.Unlock()
	if was != nil && was.String() != c.String() {
		so.endAll()
	}
	return ""
}

// answer sends the reply to a request: the envelope (action, requestId, status) and the
// fields of body, a JSON object or nil.
func (so *socket) answer(action string, requestID json.RawMessage, body []byte) {
	so.send(envelope(action, requestID, "success", body))
}

// refuse sends an error reply in DeviceHive's form: {"status": "error", "code": N,
// "error": "..."}.
func (so *socket) refuse(action string, requestID json.RawMessage, code int, msg string) {
	so.s.metrics.errors.Inc()
	b, _ := json.Marshal(struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}{code, msg})
	so.send(envelope(action, requestID, "error", b))
}

// envelope is {"action":..,"requestId":..,"status":..} followed by body's fields.
func envelope(action string, requestID json.RawMessage, status string, body []byte) []byte {
	a, _ := json.Marshal(action)
	m := make([]byte, 0, 64+len(body))
	m = append(m, `{"action":`...)
	m = append(m, a...)
	if len(requestID) > 0 {
		m = append(m, `,"requestId":`...)
		m = append(m, requestID...)
	}
	m = append(m, `,"status":"`...)
	m = append(m, status...)
	m = append(m, '"')
	return appendFields(m, body)
}

// appendFields appends the fields of the JSON object obj (nothing for nil or "{}") to
// m, an object still open, and closes it.
func appendFields(m, obj []byte) []byte {
	inner := trimObject(obj)
	if len(inner) > 0 {
		m = append(m, ',')
		m = append(m, inner...)
	}
	return append(m, '}')
}

// trimObject is what is between a JSON object's braces, spaces trimmed ("" for
// anything else).
func trimObject(obj []byte) []byte {
	b := trimSpace(obj)
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' || !json.Valid(b) {
		return nil
	}
	return trimSpace(b[1 : len(b)-1])
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
