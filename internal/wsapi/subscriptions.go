package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gorilla/websocket"

	"github.com/iotsafe/iotsafe/internal/transport"
)

// subscription is one of a socket's follows of the store.
type subscription struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when its follower returned
}

// errSocketClosed ends a follower whose socket is gone.
var errSocketClosed = errors.New("socket closed")

// subscribe starts a subscription (kind: notifications or commands) from msg's
// deviceId (or deviceIds), names, timestamp and, for commands, returnUpdatedCommands;
// the reply names it, and its pushes follow: {"action": "notification/insert" (or
// "command/insert", "command/update"), "subscriptionId": N, "notification": {...}}.
func (so *socket) subscribe(action string, reqID json.RawMessage, msg map[string]json.RawMessage, kind string) {
	if ids, ok := msg["deviceIds"]; ok {
		delete(msg, "deviceIds")
		if _, named := msg["deviceId"]; !named {
			msg["deviceId"] = ids // a list becomes REST's comma-separated deviceId
		}
	}
	q, err := queryOf(msg)
	if err != nil {
		so.refuse(action, reqID, http.StatusBadRequest, err.Error())
		return
	}
	push := kind + "/insert"
	if kind == transport.FollowCommands && q.Get("returnUpdatedCommands") == "true" {
		push = "command/update"
	}
	so.mu.Lock()
	caller := so.caller
	switch {
	case caller == nil:
		so.mu.Unlock()
		so.refuse(action, reqID, http.StatusUnauthorized, "authenticate first: {\"action\":\"authenticate\",\"token\":ACCESS_TOKEN}")
		return
	case len(so.subs) >= so.s.cfg.MaxSubscriptions:
		so.mu.Unlock()
		so.refuse(action, reqID, http.StatusTooManyRequests, fmt.Sprintf("this socket holds %d subscriptions, its most (websocket.max_subscriptions): unsubscribe one first", so.s.cfg.MaxSubscriptions))
		return
	}
	so.lastSub++
	id := so.lastSub
	ctx, cancel := context.WithCancel(so.ctx)
	sub := &subscription{cancel: cancel, done: make(chan struct{})}
	so.subs[id] = sub
	so.subsDone.Add(1)
	so.mu.Unlock()

	first := make(chan error, 1)
	prefix := []byte(`{"action":"` + push + `","subscriptionId":` + strconv.FormatInt(id, 10) + `,"` + kind + `":`)
	go func() {
		defer so.subsDone.Done()
		defer close(sub.done)
		started := false
		err := caller.Follow(ctx, kind, q, func() {
			started = true
			so.answer(action, reqID, []byte(`{"subscriptionId":`+strconv.FormatInt(id, 10)+`}`))
			so.s.metrics.subscriptions.Inc()
			first <- nil
		}, func(item json.RawMessage) error {
			m := make([]byte, 0, len(prefix)+len(item)+1)
			m = append(append(append(m, prefix...), item...), '}')
			if !so.send(m) {
				return errSocketClosed
			}
			so.s.metrics.pushes.Inc()
			return nil
		})
		so.forget(id)
		if !started {
			first <- err
			return
		}
		so.s.metrics.subscriptions.Dec()
		so.followEnded(caller, id, ctx, err)
	}()
	if err := <-first; err != nil {
		so.refuseErr(action, reqID, err)
	}
}

// followEnded acts on a subscription that ended without being asked to: its caller's
// access ended (the socket closes), or the store failed (logged).
func (so *socket) followEnded(caller transport.DeviceHiveCaller, id int64, ctx context.Context, err error) {
	if ctx.Err() != nil || errors.Is(err, errSocketClosed) {
		return
	}
	if !caller.Valid() {
		so.s.metrics.closed.WithLabelValues("access_ended").Inc()
		so.close(websocket.ClosePolicyViolation, "access ended: "+caller.String()+" was revoked, removed or given new credentials")
		return
	}
	so.s.log.Warn("a subscription ended", "caller", caller.String(), "subscription", id, "err", err)
}

// unsubscribe ends the subscription msg names.
func (so *socket) unsubscribe(action string, reqID json.RawMessage, msg map[string]json.RawMessage) {
	v, ok, err := scalar(msg["subscriptionId"])
	id, perr := strconv.ParseInt(v, 10, 64)
	if err != nil || !ok || perr != nil {
		so.refuse(action, reqID, http.StatusBadRequest, action+" needs \"subscriptionId\": the number subscribe answered")
		return
	}
	so.mu.Lock()
	sub := so.subs[id]
	so.mu.Unlock()
	if sub == nil {
		so.refuse(action, reqID, http.StatusNotFound, fmt.Sprintf("subscription %d not found on this socket", id))
		return
	}
	sub.cancel()
	<-sub.done
	so.answer(action, reqID, nil)
}

// forget removes subscription id from the socket's.
func (so *socket) forget(id int64) {
	so.mu.Lock()
	if sub := so.subs[id]; sub != nil {
		sub.cancel()
		delete(so.subs, id)
	}
	so.mu.Unlock()
}

// endAll ends every subscription (the socket now speaks for another caller).
func (so *socket) endAll() {
	so.mu.Lock()
	subs := make([]*subscription, 0, len(so.subs))
	for _, sub := range so.subs {
		subs = append(subs, sub)
	}
	so.mu.Unlock()
	for _, sub := range subs {
		sub.cancel()
		<-sub.done
	}
}
