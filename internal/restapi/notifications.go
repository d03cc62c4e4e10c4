package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// notificationJSON is DeviceHive's notification record.
type notificationJSON struct {
	ID              int64           `json:"id"`
	Notification    string          `json:"notification"`
	DeviceID        string          `json:"deviceId"`
	NetworkID       *int64          `json:"networkId"`
	DeviceTypeID    *int64          `json:"deviceTypeId"`
	Timestamp       string          `json:"timestamp"`
	Parameters      json.RawMessage `json:"parameters"`
	DeviceTimestamp string          `json:"deviceTimestamp,omitempty"` // the device's own time, if it gave one
}

func toJSON(ns []telemetry.Notification) []notificationJSON {
	out := make([]notificationJSON, len(ns))
	for i, n := range ns {
		p := n.Parameters
		if p == nil {
			p = json.RawMessage("null")
		}
		out[i] = notificationJSON{ID: n.ID, Notification: n.Name, DeviceID: n.Device, Timestamp: telemetry.FormatTime(n.Timestamp), Parameters: p}
		if n.DeviceTime != nil {
			out[i].DeviceTimestamp = telemetry.FormatTime(*n.DeviceTime)
		}
	}
	return out
}

// insertAnswer is DeviceHive's answer to an insert.
type insertAnswer struct {
	ID        int64  `json:"id"`
	Timestamp string `json:"timestamp"`
}

// insertNotification is POST /device/{id}/notification: a device stores one of its own.
func (a *API) insertNotification(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	if c.device == "" {
		fail(w, http.StatusForbidden, "only a device writes notifications, and only its own")
		return
	}
	if id != c.device {
		fail(w, http.StatusForbidden, fmt.Sprintf("device %s may write only its own notifications, not %s's", c.device, trim(id)))
		return
	}
	var in struct {
		Notification string          `json:"notification"`
		Parameters   json.RawMessage `json:"parameters"`
		Timestamp    string          `json:"timestamp"`
	}
	if !a.decode(w, r, &in) {
		return
	}
	n := telemetry.Notification{Device: id, Name: in.Notification, Parameters: in.Parameters}
	if string(n.Parameters) == "null" {
		n.Parameters = nil
	}
	if in.Timestamp != "" {
		t, err := telemetry.ParseTime(in.Timestamp)
		if err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		n.DeviceTime = &t
	}
	if in.Notification == "" {
		fail(w, http.StatusBadRequest, `give "notification": the notification's name`)
		return
	}
	got, err := a.store.Append(r.Context(), n)
	switch {
	case refusedBeforeWrite(w, err):
		return
	case errors.Is(err, telemetry.ErrOverloaded):
		a.metrics.overloaded.Inc()
		overloaded(w, 1)
		return
	case errors.Is(err, telemetry.ErrInvalid):
		fail(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "telemetry: "))
		return
	case err != nil:
		a.log.Error("storing a notification failed", "device", id, "err", err)
		fail(w, http.StatusServiceUnavailable, "storing failed; nothing was stored, retry")
		return
	}
	a.metrics.stored.Inc()
	writeJSON(w, http.StatusCreated, insertAnswer{ID: got[0].ID, Timestamp: telemetry.FormatTime(got[0].Timestamp)})
}

// listNotifications is GET /device/{id}/notification.
func (a *API) listNotifications(w http.ResponseWriter, r *http.Request, c caller) {
	st, ok := a.pathDevice(w, r, c)
	if !ok {
		return
	}
	lp, err := readListParams(r.URL.Query(), "notification")
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	f := telemetry.Filter{Devices: []string{st.Name}, Names: lp.names, Start: lp.start, End: lp.end, SortBy: lp.sortBy, Desc: lp.desc, Take: lp.take, Skip: lp.skip}
	got, err := a.store.List(r.Context(), f)
	answerList(w, got, err, "reading notifications")
}

// listParams are a list call's query parameters: DeviceHive's paging, sorting, time range
// and name (of a notification or a command).
type listParams struct {
	take, skip int
	names      []string
	start, end time.Time
	sortBy     string
	desc       bool
}

// readListParams reads take, skip, sortField, sortOrder, start, end and the name
// parameter nameKey.
func readListParams(q url.Values, nameKey string) (listParams, error) {
	lp := listParams{sortBy: q.Get("sortField"), desc: strings.EqualFold(q.Get("sortOrder"), "DESC")}
	var err error
	if lp.take, lp.skip, err = paging(q.Get("take"), q.Get("skip")); err != nil {
		return lp, err
	}
	if n := q.Get(nameKey); n != "" {
		lp.names = []string{n}
	}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"start", &lp.start}, {"end", &lp.end}} {
		if v := q.Get(p.name); v != "" {
			if *p.to, err = telemetry.ParseTime(v); err != nil {
				return lp, fmt.Errorf("%s: %v", p.name, err)
			}
		}
	}
	return lp, nil
}

// answerList writes a list of notifications, or the store's error: 400 for a query it
// refused, 503 for a failure (retry).
func answerList(w http.ResponseWriter, got []telemetry.Notification, err error, what string) {
	switch {
	case errors.Is(err, telemetry.ErrInvalid):
		fail(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "telemetry: invalid notification: "))
	case err != nil:
		fail(w, http.StatusServiceUnavailable, what+" failed; retry")
	default:
		writeJSON(w, http.StatusOK, toJSON(got))
	}
}

// getNotification is GET /device/{id}/notification/{nid}.
func (a *API) getNotification(w http.ResponseWriter, r *http.Request, c caller) {
	st, ok := a.pathDevice(w, r, c)
	if !ok {
		return
	}
	nid, err := strconv.ParseInt(r.PathValue("nid"), 10, 64)
	if err != nil {
		fail(w, http.StatusBadRequest, "notification id must be a number")
		return
	}
	n, err := a.store.Get(r.Context(), st.Name, nid)
	if errors.Is(err, telemetry.ErrNotFound) {
		fail(w, http.StatusNotFound, fmt.Sprintf("notification with id %d not found", nid))
		return
	}
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "reading the notification failed; retry")
		return
	}
	writeJSON(w, http.StatusOK, toJSON([]telemetry.Notification{n})[0])
}

// pollDevice is GET /device/{id}/notification/poll.
func (a *API) pollDevice(w http.ResponseWriter, r *http.Request, c caller) {
	st, ok := a.pathDevice(w, r, c)
	if !ok {
		return
	}
	a.poll(w, r, c, []string{st.Name})
}

// pollMany is GET /device/notification/poll: deviceId (one, or several comma-separated),
// or every device the caller may read.
func (a *API) pollMany(w http.ResponseWriter, r *http.Request, c caller) {
	devs, ok := a.devicesParam(w, r, c)
	if ok {
		a.poll(w, r, c, devs)
	}
}

// devicesParam reads deviceId: the named devices (each one the caller may read; an
// unknown or hidden one is 404), or all the caller may read; then networkIds and
// deviceTypeIds keep those in the networks and device types named.
func (a *API) devicesParam(w http.ResponseWriter, r *http.Request, c caller) ([]string, bool) {
	devs, ok := a.namedDevices(w, r, c)
	if !ok {
		return nil, false
	}
	return a.devicesInGroups(w, r, devs)
}

// devicesInGroups applies a poll's networkIds and deviceTypeIds to devs, or answers why
// not.
func (a *API) devicesInGroups(w http.ResponseWriter, r *http.Request, devs []string) ([]string, bool) {
	devs, err := a.inGroups(r.Context(), r.URL.Query(), devs)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	return devs, true
}

// namedDevices is devicesParam before the group filters.
func (a *API) namedDevices(w http.ResponseWriter, r *http.Request, c caller) ([]string, bool) {
	param := r.URL.Query().Get("deviceId")
	if param == "" {
		if c.device != "" {
			return []string{c.device}, true
		}
		return a.hub.Policy().DevicesWithRight(c.accountID, registry.RightTelemetry, a.dir.Load().Names()), true
	}
	d := a.dir.Load()
	var out []string
	for _, id := range strings.Split(param, ",") {
		id = strings.TrimSpace(id)
		if _, ok := d.Device(id); !ok || !profile.ValidName(id) || !a.mayRead(c, id) {
			fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found", trim(id)))
			return nil, false
		}
		out = append(out, id)
	}
	return out, true
}

// pollFilter reads timestamp, names and limit.
func pollFilter(q map[string][]string, devices []string) (telemetry.Filter, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := telemetry.Filter{Devices: devices}
	if ts := get("timestamp"); ts != "" {
		t, err := telemetry.ParseTime(ts)
		if err != nil {
			return f, err
		}
		f.After = t
	}
	if names := get("names"); names != "" {
		f.Names = strings.Split(names, ",")
	}
	if l := get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return f, fmt.Errorf("limit %q: want a number from 0", trim(l))
		}
		f.Take = n
	}
	return f, nil
}

func (a *API) poll(w http.ResponseWriter, r *http.Request, c caller, devices []string) {
	q := r.URL.Query()
	f, err := pollFilter(q, devices)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	wait, ok := a.waitTimeout(w, r)
	if !ok {
		return
	}
	gens := a.enrolments(devices)
	var got []telemetry.Notification
	if wait == 0 {
		got = []telemetry.Notification{}
		if !f.After.IsZero() {
			got, err = a.store.List(r.Context(), telemetry.Filter{Devices: f.Devices, Names: f.Names, After: f.After, Take: f.Take})
		}
	} else {
		release, ok := a.holdPoll(w, c)
		if !ok {
			return
		}
		defer release()
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		got, err = a.store.Poll(ctx, f)
		cancel()
	}
	answerList(w, a.sameEnrolments(gens, got), err, "polling")
}

// enrolments are the devices' enrolments (registry.DeviceState.Gen) as a poll or stream
// starts: what it delivers belongs to them, not to whichever device later has the name.
func (a *API) enrolments(devices []string) map[string]int64 {
	d := a.dir.Load()
	gens := make(map[string]int64, len(devices))
	for _, name := range devices {
		if st, ok := d.Device(name); ok {
			gens[name] = st.Gen()
		}
	}
	return gens
}

// sameEnrolments keeps the notifications of devices still enrolled as they were when
// gens was taken: a device removed (and maybe enrolled again) since delivers nothing.
func (a *API) sameEnrolments(gens map[string]int64, ns []telemetry.Notification) []telemetry.Notification {
	d := a.dir.Load()
	kept := ns[:0]
	for _, n := range ns {
		if st, ok := d.Device(n.Device); ok && gens[n.Device] == st.Gen() {
			kept = append(kept, n)
		}
	}
	return kept
}

// enrolled reports whether any device of gens is still the enrolment it was.
func (a *API) enrolled(gens map[string]int64) bool {
	d := a.dir.Load()
	for name, gen := range gens {
		if st, ok := d.Device(name); ok && st.Gen() == gen {
			return true
		}
	}
	return false
}

// holdPoll takes one of rest.max_polls places for a long poll or stream, within the
// caller's own budget (rest.max_polls_per_device or _per_account), or answers why not:
// 429 for a caller over its budget, 503 when the hub's places are all taken.
func (a *API) holdPoll(w http.ResponseWriter, c caller) (release func(), ok bool) {
	key, limit, what := "a:"+strconv.FormatInt(c.accountID, 10), a.cfg.MaxPollsPerAccount, "account "+c.account+" holds"
	if c.device != "" {
		key, limit, what = "d:"+c.device, a.cfg.MaxPollsPerDevice, "device "+c.device+" holds"
	}
	if !a.held.take(key, limit) {
		w.Header().Set("Retry-After", "5")
		fail(w, http.StatusTooManyRequests, fmt.Sprintf("%s %d long polls and streams, its most (rest.max_polls_per_%s): end one first", what, limit, strings.Fields(what)[0]))
		return nil, false
	}
	select {
	case a.polls <- struct{}{}:
	default:
		a.held.give(key)
		w.Header().Set("Retry-After", "5")
		fail(w, http.StatusServiceUnavailable, fmt.Sprintf("the hub holds %d long polls and streams, its most (rest.max_polls): retry after 5 s", a.cfg.MaxPolls))
		return nil, false
	}
	a.metrics.polls.Inc()
	return func() { a.metrics.polls.Dec(); <-a.polls; a.held.give(key) }, true
}

// pollHolders counts the polls and streams each device and account holds.
type pollHolders struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pollHolders) take(key string, limit int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	if p.n[key] >= limit {
		return false
	}
	p.n[key]++
	return true
}

func (p *pollHolders) give(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[key]--; p.n[key] <= 0 {
		delete(p.n, key)
	}
}

// stream is GET /device/notification/stream: server-sent events, one "notification"
// event per notification, its id the notification's timestamp (a reconnecting
// EventSource sends it back as Last-Event-ID and misses nothing).
func (a *API) stream(w http.ResponseWriter, r *http.Request, c caller) {
	devs, ok := a.devicesParam(w, r, c)
	if !ok {
		return
	}
	q := r.URL.Query()
	if last := r.Header.Get("Last-Event-ID"); last != "" && q.Get("timestamp") == "" {
		q.Set("timestamp", last)
	}
	f, err := pollFilter(q, devs)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	release, ok := a.holdPoll(w, c)
	if !ok {
		return
	}
	defer release()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": iotsafe notification stream\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	a.followNotifications(r.Context(), c, devs, f, func(n notificationJSON) error {
		b, _ := json.Marshal(n)
		fmt.Fprintf(w, "id: %s\nevent: notification\ndata: %s\n\n", n.Timestamp, b)
		return nil
	}, func() error { return rc.Flush() }, func() {
		fmt.Fprint(w, "event: end\ndata: {\"message\":\"access ended\"}\n\n")
		rc.Flush()
	})
}

// followNotifications sends each notification f selects to each, as it is committed,
// until ctx ends or each or flush fails; ended is called when c's access ends. Rights are
// checked on every batch: a revoked device or account, or a removed grant, ends it; so
// does the removal of every device it follows (a device enrolled again under a name is
// another device).
func (a *API) followNotifications(ctx context.Context, c caller, devs []string, f telemetry.Filter, each func(notificationJSON) error, flush func() error, ended func()) error {
	gens := a.enrolments(devs)
	return a.store.Stream(ctx, f, func(ns []telemetry.Notification) error {
		if !a.stillValid(c) || !a.enrolled(gens) {
			ended()
			return errAccessEnded
		}
		for _, n := range toJSON(a.sameEnrolments(gens, ns)) {
			if !a.mayRead(c, n.DeviceID) {
				continue
			}
			if err := each(n); err != nil {
				return err
			}
		}
		return flush()
	})
}

// errAccessEnded ends a stream or subscription whose caller's access ended.
var errAccessEnded = errors.New("access ended")

// stillValid reports whether c's identity is still live (streams outlast the check at
// their start).
func (a *API) stillValid(c caller) bool {
	if c.device != "" {
		d := a.dir.Load()
		st, ok := d.Device(c.device)
		return ok && !st.Revoked && st.Gen() == c.gen && (c.cred == "" || d.Cred(c.device) == c.cred)
	}
	acc := a.accountsOrNil()
	if acc == nil {
		return false
	}
	name, ok := acc.Name(c.accountID)
	if c.cred != "" {
		cred, _ := acc.Credential(c.accountID)
		ok = ok && cred == c.cred
	}
	return ok && name == c.account
}
