package console

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshd"
)

// page is what every template gets; each page fills its part.
type page struct {
	Title, Error, Notice, Next string
	Who                        string
	CSRF                       string
	Nav                        string // which item of the navigation is current
	Live                       string // the live stream's URL, if the page follows changes

	Fleet     *fleetView
	List      *listView
	Dev       *deviceView
	Confirm   *confirmView
	Audit     *auditView
	Posture   *postureView
	Accounts  *accountsView
	Secret    *secretView
	CanAdmin  bool
	Generated time.Time
}

func (c *Console) base(cl caller, title, nav string) page {
	return page{Title: title, Who: cl.Name, CSRF: cl.csrf, Nav: nav, Generated: time.Now().UTC(), CanAdmin: c.fleetAdmin(cl)}
}

// scope is what the caller holds right on, as the registry's fleet queries take it.
func (c *Console) scope(cl caller, right string) registry.Scope {
	all, names, groups := c.d.Policy().ScopeOf(cl.ID, right)
	return registry.Scope{All: all, Names: names, Groups: groups}
}

var funcs = template.FuncMap{
	"ago": func(t *time.Time) string {
		if t == nil {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
	},
	"state": deviceState,
	"query": withQuery,
	"add":   func(a, b int) int { return a + b },
	"json":  jsonText,
}

// withQuery is base's query string with key set to value ("" removes it).
func withQuery(base url.Values, key, value string) string {
	v := url.Values{}
	for k, vs := range base {
		v[k] = slices.Clone(vs)
	}
	if value == "" {
		v.Del(key)
	} else {
		v.Set(key, value)
	}
	return v.Encode()
}

// deviceState is a device's state as the console says it.
func deviceState(d *registry.Device) string {
	switch {
	case d.Revoked() && registry.IsPending(d.RevokeWhy):
		return registry.StatePending
	case d.Revoked():
		return registry.StateRevoked
	case d.Hub != "":
		return registry.StateOnline
	}
	return registry.StateOffline
}

// fleetView is the fleet at a glance.
type fleetView struct {
	Counts  registry.FleetCounts
	Hubs    []kv
	Gates   []kv
	Refused []kv // refusals and violations in the last hour, by kind
	Health  Health
	// LastScan is the newest 'iotsafe scan --hub' of this hub, nil if none.
	LastScan *registry.Event
}

type kv struct {
	K string
	V int
}

func sortedKV(m map[string]int) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.K, b.K) })
	return out
}

// refusalKinds are the audit events the fleet page counts for the last hour.
var refusalKinds = []string{registry.EventViolation, registry.EventAuthRefused, registry.EventSSHCertRefused, registry.EventJoinRefused}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, cl caller) {
	ctx := r.Context()
	scope := c.scope(cl, registry.RightView)
	counts, err := c.d.Registry.Fleet(ctx, scope)
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	fv := &fleetView{Counts: counts, Hubs: sortedKV(counts.ByHub), Gates: sortedKV(counts.ByGateway)}
	hourAgo := time.Now().Add(-time.Hour)
	for _, kind := range refusalKinds {
		evs, err := c.d.Registry.Events(ctx, registry.EventFilter{Kind: kind, Limit: 1000})
		if err != nil {
			c.fail(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		n := 0
		for _, e := range evs {
			if e.At.After(hourAgo) && c.visible(cl, scope, e.Device) {
				n++
			}
		}
		fv.Refused = append(fv.Refused, kv{kind, n})
	}
	if c.d.Health != nil {
		fv.Health = c.d.Health()
		if evs, err := c.d.Registry.Events(ctx, registry.EventFilter{Kind: registry.EventHubScanned, Hub: fv.Health.Hub, Limit: 1}); err == nil && len(evs) > 0 {
			fv.LastScan = &evs[0]
		}
	}
	p := c.base(cl, "Fleet", "fleet")
	p.Fleet, p.Live = fv, "/console/live"
	c.render(w, http.StatusOK, "overview.html", p)
}

// visible reports whether the caller may see device (an event's): "" (the hub's own
// events) only with the whole fleet in scope.
func (c *Console) visible(cl caller, scope registry.Scope, device string) bool {
	if scope.All {
		return true
	}
	return device != "" && c.d.Policy().AllowedAccount(cl.ID, device, registry.RightView)
}

// listView is one page of the device list.
type listView struct {
	Q           url.Values
	Page        registry.FleetPage
	Offset, Len int
	Prev, Next  string
	States      []string
}

const pageSize = 50

func (c *Console) devices(w http.ResponseWriter, r *http.Request, cl caller) {
	q := r.URL.Query()
	offset, _ := strconv.Atoi(q.Get("offset"))
	fq := registry.FleetQuery{
		Scope: c.scope(cl, registry.RightView), Pattern: strings.TrimSpace(q.Get("q")), State: q.Get("state"),
		Profile: q.Get("profile"), Gateway: q.Get("gateway"), Hub: q.Get("hub"), Group: q.Get("group"), Sort: q.Get("sort"),
		Offset: max(offset, 0), Limit: pageSize,
	}
	res, err := c.d.Registry.FleetDevices(r.Context(), fq)
	p := c.base(cl, "Devices", "devices")
	if err != nil {
		// A bad filter is the caller's to fix: said on the page, nothing listed.
		p.Error = strings.TrimPrefix(err.Error(), "registry: ")
	}
	lv := &listView{Q: q, Page: res, Offset: fq.Offset, Len: len(res.Devices), States: []string{registry.StateOnline, registry.StateOffline, registry.StateRevoked, registry.StatePending}}
	if fq.Offset > 0 {
		lv.Prev = "?" + withQuery(q, "offset", strconv.Itoa(max(fq.Offset-pageSize, 0)))
	}
	if fq.Offset+len(res.Devices) < res.Total {
		lv.Next = "?" + withQuery(q, "offset", strconv.Itoa(fq.Offset+pageSize))
	}
	p.List, p.Live = lv, "/console/live"
	c.render(w, http.StatusOK, "devices.html", p)
}

// deviceView is a device's page.
type deviceView struct {
	D          *registry.Device
	State      string
	Sessions   []sshd.SessionInfo
	Profile    *profile.Profile
	ProfileErr string
	Grants     []registry.Grant
	Events     []registry.Event
	CanOperate bool
	CanAdmin   bool
	Telemetry  *telemetryView
}

// visibleDevice is the device if the caller may see it; a device it may not see is
// answered as one that does not exist.
func (c *Console) visibleDevice(ctx context.Context, cl caller, name string) (*registry.Device, error) {
	if !c.d.Policy().AllowedAccount(cl.ID, name, registry.RightView) {
		return nil, registry.ErrNotFound
	}
	return c.d.Registry.Device(ctx, name)
}

func (c *Console) device(w http.ResponseWriter, r *http.Request, cl caller) {
	ctx := r.Context()
	name := r.PathValue("name")
	d, err := c.visibleDevice(ctx, cl, name)
	if errors.Is(err, registry.ErrNotFound) {
		c.fail(w, http.StatusNotFound, "no such device")
		return
	}
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	pol := c.d.Policy()
	dv := &deviceView{D: d, State: deviceState(d), Grants: pol.GrantsOn(name),
		CanOperate: pol.AllowedAccount(cl.ID, name, registry.RightOperate), CanAdmin: pol.AllowedAccount(cl.ID, name, registry.RightAdmin)}
	if c.d.Sessions != nil {
		dv.Sessions = c.d.Sessions(name)
	}
	if dv.Profile, err = c.d.Registry.Profile(ctx, d.Profile); err != nil {
		dv.ProfileErr = err.Error()
	}
	if dv.Events, err = c.d.Registry.Events(ctx, registry.EventFilter{Device: name, Limit: 20}); err == nil {
		slices.Reverse(dv.Events)
	}
	dv.Telemetry = c.deviceTelemetry(ctx, name)
	p := c.base(cl, d.Name, "devices")
	p.Dev, p.Live = dv, "/console/live?device="+url.QueryEscape(name)
	p.Notice = r.URL.Query().Get("done")
	c.render(w, http.StatusOK, "device.html", p)
}

// actions are what the console changes on a device: the right each takes, whether it
// asks for the password again, and the change.
var actions = map[string]struct {
	right, verb, says string
	password          bool
	change            func(device, reason, who string) control.Change
}{
	"revoke": {registry.RightOperate, "Revoke", "Its sessions close at once on every hub, and every path refuses it until it is reinstated.", true,
		func(d, reason, who string) control.Change {
			return control.RevokeDevice{Device: d, Reason: strings.TrimSpace("revoked in the console by " + who + ": " + reason)}
		}},
	"reinstate": {registry.RightOperate, "Reinstate", "Its keys work again and its violation count starts at 0.", false,
		func(d, _, _ string) control.Change { return control.ReinstateDevice{Device: d} }},
	"remove": {registry.RightAdmin, "Remove", "Its keys, sockets, grants and notifications are deleted; it cannot connect until enrolled again.", true,
		func(d, _, _ string) control.Change { return control.RemoveDevice{Device: d} }},
	"approve": {registry.RightOperate, "Approve", "It joined, or was enrolled by its certificate, pending approval: from now on it connects like any device.", false,
		func(d, _, _ string) control.Change { return control.ApproveDevice{Device: d} }},
	"reject": {registry.RightAdmin, "Reject", "It is removed; its name is free again for another enrolment.", true,
		func(d, _, _ string) control.Change { return control.RemoveDevice{Device: d} }},
	// The change is made in act: the new secret is shown once, on the page that answers.
	"rotate-secret": {registry.RightAdmin, "Rotate the telemetry secret of", "A new secret replaces the old one at once, on every hub: whatever logs in with the old one (REST, MQTT) is locked out. The new one is shown once.", true, nil},
}

// secretView shows a new secret once.
type secretView struct{ Device, Secret string }

// confirmView is the page that confirms an action.
type confirmView struct {
	Device, Action, Verb, Says string
	Reason                     string // kept when the page comes back with an error
	Password                   bool
}

func (c *Console) confirmPage(w http.ResponseWriter, r *http.Request, cl caller) {
	name, action := r.PathValue("name"), r.PathValue("action")
	a, ok := actions[action]
	if !ok {
		c.fail(w, http.StatusNotFound, "no such page")
		return
	}
	if _, err := c.visibleDevice(r.Context(), cl, name); err != nil {
		c.fail(w, http.StatusNotFound, "no such device")
		return
	}
	if !c.d.Policy().AllowedAccount(cl.ID, name, a.right) {
		c.fail(w, http.StatusForbidden, fmt.Sprintf("%s needs %s on %s", action, a.right, name))
		return
	}
	p := c.base(cl, a.verb+" "+name, "devices")
	p.Confirm = &confirmView{Device: name, Action: action, Verb: a.verb, Says: a.says, Password: a.password}
	c.render(w, http.StatusOK, "confirm.html", p)
}

func (c *Console) act(w http.ResponseWriter, r *http.Request, cl caller) {
	name, action := r.PathValue("name"), r.PathValue("action")
	a, ok := actions[action]
	if !ok {
		c.fail(w, http.StatusNotFound, "no such action")
		return
	}
	if _, err := c.visibleDevice(r.Context(), cl, name); err != nil {
		c.fail(w, http.StatusNotFound, "no such device")
		return
	}
	if !c.d.Policy().AllowedAccount(cl.ID, name, a.right) {
		c.d.Log.Warn("console: an action without the right refused", "account", cl.Name, "device", name, "action", action)
		c.fail(w, http.StatusForbidden, fmt.Sprintf("%s needs %s on %s", action, a.right, name))
		return
	}
	if action == "reject" {
		// Only a device waiting for approval is rejected; others are revoked or removed.
		if d, err := c.d.Registry.Device(r.Context(), name); err != nil || !d.Revoked() || !registry.IsPending(d.RevokeWhy) {
			c.fail(w, http.StatusConflict, name+" is not waiting for approval: revoke or remove it instead")
			return
		}
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if len(reason) > 200 {
		reason = reason[:200]
	}
	if a.password {
		if err := c.recheckPassword(r, cl); err != nil {
			p := c.base(cl, a.verb+" "+name, "devices")
			p.Confirm = &confirmView{Device: name, Action: action, Verb: a.verb, Says: a.says, Reason: reason, Password: true}
			p.Error = err.Error()
			c.render(w, http.StatusForbidden, "confirm.html", p)
			return
		}
	}
	var ch control.Change
	var secret string
	if action == "rotate-secret" {
		var hash string
		var err error
		if secret, hash, err = credential.NewToken(); err != nil {
			c.fail(w, http.StatusInternalServerError, err.Error())
			return
		}
		ch = control.SetDeviceSecret{Device: name, Hash: hash}
	} else {
		ch = a.change(name, reason, cl.Name)
	}
	out, err := c.d.Apply(r.Context(), ch)
	if err != nil {
		c.fail(w, http.StatusConflict, fmt.Sprintf("%s %s: %v", action, name, err))
		return
	}
	what := action
	if reason != "" {
		what += ": " + reason
	}
	c.audit1(r.Context(), cl, name, what)
	if secret != "" {
		p := c.base(cl, "New telemetry secret of "+name, "devices")
		p.Secret = &secretView{Device: name, Secret: secret}
		c.render(w, http.StatusOK, "secret.html", p)
		return
	}
	done := fmt.Sprintf("%s: done", a.verb)
	if out.Closed > 0 {
		done += fmt.Sprintf(", %d live session(s) closed here", out.Closed)
	}
	next := "/console/devices/" + url.PathEscape(name) + "?done=" + url.QueryEscape(done)
	if action == "remove" || action == "reject" {
		next = "/console/devices?done=" + url.QueryEscape(name+" removed")
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// auditView is the audit log page.
type auditView struct {
	Q      url.Values
	Events []registry.Event
	Kinds  []string
}

// auditKinds are offered in the audit page's filter.
var auditKinds = []string{registry.EventSessionOpen, registry.EventSessionClose, registry.EventRevoked, registry.EventReinstated,
	registry.EventViolation, registry.EventAuthRefused, registry.EventDeviceAdded, registry.EventDeviceRemoved, registry.EventJoined,
	registry.EventJoinRefused, registry.EventEnrolledByCert, registry.EventSSHCertRefused, registry.EventSSHCertRevoked, EventAction}

func (c *Console) audit(w http.ResponseWriter, r *http.Request, cl caller) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 10000 {
		limit = 200
	}
	evs, err := c.d.Registry.Events(r.Context(), registry.EventFilter{Device: q.Get("device"), Kind: q.Get("kind"), Limit: limit})
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	scope := c.scope(cl, registry.RightView)
	account := q.Get("account")
	var since time.Time
	if s := q.Get("since"); s != "" {
		if since, err = time.Parse("2006-01-02T15:04", s); err != nil {
			since, err = time.Parse(time.RFC3339, s)
		}
	}
	out := evs[:0]
	for _, e := range evs {
		switch {
		case !c.visible(cl, scope, e.Device):
		case account != "" && !strings.HasPrefix(e.Detail, "account "+account+":"):
		case !since.IsZero() && e.At.Before(since):
		default:
			out = append(out, e)
		}
	}
	slices.Reverse(out) // newest first
	switch q.Get("format") {
	case "jsonl":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", `attachment; filename="iotsafe-audit.jsonl"`)
		enc := json.NewEncoder(w)
		for _, e := range out {
			enc.Encode(e)
		}
		return
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="iotsafe-audit.csv"`)
		cw := csv.NewWriter(w)
		cw.Write([]string{"id", "time", "device", "kind", "detail", "remote", "hub"})
		for _, e := range out {
			cw.Write([]string{strconv.FormatInt(e.ID, 10), e.At.UTC().Format(time.RFC3339Nano), csvSafe(e.Device), e.Kind, csvSafe(e.Detail), csvSafe(e.Remote), csvSafe(e.Hub)})
		}
		cw.Flush()
		return
	}
	p := c.base(cl, "Audit log", "audit")
	if err != nil {
		p.Error = "since: want YYYY-MM-DDTHH:MM"
	}
	p.Audit, p.Live = &auditView{Q: q, Events: out, Kinds: auditKinds}, "/console/live"
	c.render(w, http.StatusOK, "audit.html", p)
}

// csvSafe keeps a spreadsheet from reading a device-supplied field as a formula.
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
