package restapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// deviceJSON is DeviceHive's device record.
type deviceJSON struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Data         json.RawMessage `json:"data"`
	NetworkID    *int64          `json:"networkId"`
	DeviceTypeID *int64          `json:"deviceTypeId"`
	IsBlocked    bool            `json:"isBlocked"`
}

// mayRead reports whether c may read device (its own record, or +telemetry); the
// answer for a device c may not see is 404, as if it did not exist.
func (a *API) mayRead(c caller, device string) bool {
	if c.device != "" {
		return c.device == device
	}
	return a.hub.Policy().AllowedAccount(c.accountID, device, registry.RightTelemetry)
}

func (a *API) mayManage(c caller, device string) bool {
	return c.device == "" && a.hub.Policy().AllowedAccount(c.accountID, device, registry.RightManage)
}

// pathDevice returns the {id} of the path if it names a device c may read, else
// answers 404 itself.
func (a *API) pathDevice(w http.ResponseWriter, r *http.Request, c caller) (registry.DeviceState, bool) {
	id := r.PathValue("id")
	st, ok := a.dir.Load().Device(id)
	if !ok || !profile.ValidName(id) || !a.mayRead(c, id) {
		fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found", trim(id)))
		return st, false
	}
	return st, true
}

func (a *API) deviceRecord(ctx context.Context, cat catalog, st registry.DeviceState) (deviceJSON, error) {
	data, err := a.reg.DeviceData(ctx, st.Name)
	if err != nil {
		return deviceJSON{}, err
	}
	if data == nil {
		data = json.RawMessage("null")
	}
	net, typ := cat.ids(a.hub.Policy().DeviceGroups()[st.Name])
	return deviceJSON{ID: st.Name, Name: st.Name, Data: data, IsBlocked: st.Revoked, NetworkID: net, DeviceTypeID: typ}, nil
}

func (a *API) getDevice(w http.ResponseWriter, r *http.Request, c caller) {
	st, ok := a.pathDevice(w, r, c)
	if !ok {
		return
	}
	cat, err := a.catalog(r.Context())
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "reading the device failed; retry")
		return
	}
	d, err := a.deviceRecord(r.Context(), cat, st)
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "reading the device failed; retry")
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// listDevices is GET /device: the devices c may read, by name.
func (a *API) listDevices(w http.ResponseWriter, r *http.Request, c caller) {
	q := r.URL.Query()
	take, skip, err := paging(q.Get("take"), q.Get("skip"))
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	name, pattern := q.Get("name"), q.Get("namePattern")
	desc := strings.EqualFold(q.Get("sortOrder"), "DESC")
	if sf := q.Get("sortField"); sf != "" && sf != "name" && sf != "id" {
		fail(w, http.StatusBadRequest, fmt.Sprintf("sortField %q: devices sort by name", trim(sf)))
		return
	}
	cat, err := a.catalog(r.Context())
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "reading devices failed; retry")
		return
	}
	want, matchable, err := listFilter(cat, q)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	d := a.dir.Load()
	members := a.hub.Policy().DeviceGroups()
	var names []string
	for _, n := range d.Names() {
		if matchable && (name == "" || n == name) && (pattern == "" || likeMatch(pattern, n)) && a.mayRead(c, n) && matchesGroups(cat, members[n], want) {
			names = append(names, n)
		}
	}
	if desc {
		for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
			names[i], names[j] = names[j], names[i]
		}
	}
	out := []deviceJSON{}
	for i := skip; i < len(names) && len(out) < take; i++ {
		st, _ := d.Device(names[i])
		rec, err := a.deviceRecord(r.Context(), cat, st)
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "reading devices failed; retry")
			return
		}
		out = append(out, rec)
	}
	writeJSON(w, http.StatusOK, out)
}

// likeMatch is SQL LIKE with % and _, as DeviceHive's namePattern; linear backtracking
// to the last %, so no pattern can make it slow.
func likeMatch(p, s string) bool {
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '%':
			star, mark = pi, si
			pi++
		case pi < len(p) && (p[pi] == '_' || p[pi] == s[si]):
			pi++
			si++
		case star >= 0:
			pi, mark = star+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '%' {
		pi++
	}
	return pi == len(p)
}

// deviceBody is what PUT /device/{id} takes.
type deviceBody struct {
	Name         *string         `json:"name"`
	Data         json.RawMessage `json:"data"`
	IsBlocked    *bool           `json:"isBlocked"`
	NetworkID    json.RawMessage `json:"networkId"`
	DeviceTypeID json.RawMessage `json:"deviceTypeId"`
}

// putDevice is PUT /device/{id}: a device updates its data; an account with +manage may
// also block (revoke) it, and registers a device not enrolled yet (registerDevice).
func (a *API) putDevice(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	st, known := a.dir.Load().Device(id)
	if !known && c.device == "" && a.hub.Policy().HoldsAnywhere(c.accountID, registry.RightManage) {
		a.registerDevice(w, r, c, id)
		return
	}
	if !known || !a.mayRead(c, id) {
		notFoundForPut(w, id)
		return
	}
	var in deviceBody
	if !a.decode(w, r, &in) {
		return
	}
	if c.device == "" && !a.mayManage(c, id) {
		fail(w, http.StatusForbidden, fmt.Sprintf("account %s may not change %s (it needs the +manage right)", c.account, id))
		return
	}
	if in.Name != nil && *in.Name != id {
		fail(w, http.StatusBadRequest, "a device's name is its id, fixed at enrolment")
		return
	}
	moved, ok := a.movedGroups(w, r, c, id, in)
	if !ok {
		return
	}
	block := in.IsBlocked != nil && *in.IsBlocked
	switch {
	case in.IsBlocked != nil && !*in.IsBlocked && st.Revoked:
		fail(w, http.StatusBadRequest, "a revoked device stays revoked: enroll it again with 'iotsafe device add'")
		return
	case block && c.device != "":
		fail(w, http.StatusForbidden, "a device cannot block itself")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if in.Data != nil {
		if !a.mayWriteData(w, c) {
			return
		}
		if err := a.reg.SetDeviceData(ctx, id, in.Data); err != nil {
			if errors.Is(err, registry.ErrNotFound) {
				fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found", id))
				return
			}
			fail(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "registry: "))
			return
		}
	}
	if moved != nil {
		if err := a.hub.SetDeviceGroups(ctx, id, moved); err != nil {
			fail(w, http.StatusServiceUnavailable, "moving the device failed: "+strings.TrimPrefix(err.Error(), "registry: "))
			return
		}
	}
	if block && !st.Revoked {
		if err := a.hub.RevokeDevice(ctx, id, "blocked by account "+c.account+" over REST"); err != nil {
			fail(w, http.StatusServiceUnavailable, "revoking failed: "+err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// registerDevice is PUT /device/{id} of a device not enrolled: an account with +manage
// on the name (a grant to it with --allow-unknown, or to @all) enrolls it as 'iotsafe
// device add' does, with the default profile and no SSH key yet; the account then
// issues it tokens (POST /token/create with deviceIds). A device removed earlier comes
// back as a new enrolment: nothing of the old one is its.
func (a *API) registerDevice(w http.ResponseWriter, r *http.Request, c caller, id string) {
	var in deviceBody
	if !a.decode(w, r, &in) {
		return
	}
	switch {
	case !profile.ValidName(id):
		fail(w, http.StatusBadRequest, fmt.Sprintf("device id %q: use lower-case letters, digits and '-' (at most 63)", trim(id)))
		return
	case in.Name != nil && *in.Name != id:
		fail(w, http.StatusBadRequest, "a device's name is its id: this hub keeps one name per device (send name equal to id, or none)")
		return
	case in.IsBlocked != nil && *in.IsBlocked:
		fail(w, http.StatusBadRequest, "a device is registered unblocked: block it afterwards with isBlocked true")
		return
	}
	cat, err := a.catalog(r.Context())
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "reading the networks failed; retry")
		return
	}
	set, err := groupsFromBody(cat, in)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	groups := withGroups(nil, set)
	if !a.hub.Policy().AllowedAccountIn(c.accountID, id, groups, registry.RightManage) {
		// +manage on the name may come from a network: registering elsewhere is not the
		// account's to do, and the answer is the one for a device it may not see.
		notFoundForPut(w, id)
		return
	}
	if !a.mayWriteData(w, c) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.hub.RegisterDevice(ctx, id, groups); err != nil {
		if errors.Is(err, registry.ErrExists) {
			fail(w, http.StatusConflict, fmt.Sprintf("device %s was enrolled meanwhile: send the request again to update it", id))
			return
		}
		fail(w, http.StatusServiceUnavailable, "registering failed: "+strings.TrimPrefix(err.Error(), "registry: "))
		return
	}
	if err := a.reg.AddEvent(ctx, registry.Event{Device: id, Kind: EventDeviceRegistered, Detail: "registered by account " + c.account + " over the REST API", Remote: remoteAddr(r).String()}); err != nil {
		a.log.Error("recording a device registration in the audit log failed", "device", id, "err", err)
	}
	a.log.Info("device registered over the REST API", "device", id, "account", c.account)
	if in.Data != nil && !isNull(in.Data) {
		if err := a.reg.SetDeviceData(ctx, id, in.Data); err != nil {
			fail(w, http.StatusBadRequest, "the device is registered, but its data was refused: "+strings.TrimPrefix(err.Error(), "registry: "))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// movedGroups reads an update's networkId and deviceTypeId: the device's new groups,
// nil for no change. Moving a device takes +manage on it where it is and where it goes;
// a device does not move itself.
func (a *API) movedGroups(w http.ResponseWriter, r *http.Request, c caller, id string, in deviceBody) ([]string, bool) {
	if isNull(in.NetworkID) && isNull(in.DeviceTypeID) {
		return nil, true
	}
	cat, err := a.catalog(r.Context())
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "reading the networks failed; retry")
		return nil, false
	}
	set, err := groupsFromBody(cat, in)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	now := a.hub.Policy().DeviceGroups()[id]
	next := withGroups(now, set)
	if slices.Equal(next, slices.Sorted(slices.Values(now))) {
		return nil, true // where it is: nothing to do
	}
	if c.device != "" || !a.mayManage(c, id) || !a.hub.Policy().AllowedAccountIn(c.accountID, id, next, registry.RightManage) {
		fail(w, http.StatusForbidden, fmt.Sprintf("%s may not move %s into %v: that takes +manage on it there and where it is", c, id, next))
		return nil, false
	}
	return next, true
}

// notFoundForPut answers PUT /device/{id} for a device the caller may neither see nor
// register.
func notFoundForPut(w http.ResponseWriter, id string) {
	fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found: devices are enrolled with 'iotsafe device add' on the hub, or registered here by an account with +manage on the name (or on @all, or on the network it names)", trim(id)))
}

// isNull reports whether v is absent or JSON null.
func isNull(v json.RawMessage) bool {
	return len(v) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// EventDeviceRegistered is recorded when an account registers a device over the API.
const EventDeviceRegistered = "device_registered"

// deleteDevice is DELETE /device/{id}: +manage removes the device from the registry,
// with its keys, sockets, secret and notifications, and closes its sessions.
func (a *API) deleteDevice(w http.ResponseWriter, r *http.Request, c caller) {
	if _, ok := a.pathDevice(w, r, c); !ok {
		return
	}
	id := r.PathValue("id")
	if !a.mayManage(c, id) {
		fail(w, http.StatusForbidden, fmt.Sprintf("%s may not remove %s (an account with the +manage right may)", c, id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.hub.RemoveDevice(ctx, id); err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found", id))
			return
		}
		fail(w, http.StatusServiceUnavailable, "removing failed: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// paging reads take and skip (DeviceHive's defaults: take 100, at most 1000).
func paging(take, skip string) (int, int, error) {
	t, s := 100, 0
	var err error
	if take != "" {
		if t, err = strconv.Atoi(take); err != nil || t < 0 {
			return 0, 0, fmt.Errorf("take %q: want a number from 0", trim(take))
		}
		if t == 0 {
			t = 100
		}
		t = min(t, 1000)
	}
	if skip != "" {
		if s, err = strconv.Atoi(skip); err != nil || s < 0 {
			return 0, 0, fmt.Errorf("skip %q: want a number from 0", trim(skip))
		}
	}
	return t, s, nil
}

// mayWriteData spends a data write of the caller's budget (rest.device_data_rate) and
// of the hub's (rest.data_writes), or answers 429 saying which is spent: each write is a
// registry transaction, and a device replacing its data in a loop must not slow the
// revocations and enrolments that share the registry.
func (a *API) mayWriteData(w http.ResponseWriter, c caller) bool {
	now := time.Now()
	key := "account " + c.account
	if c.device != "" {
		key = "device " + c.device
	}
	if wait, ok := a.dataWrites.Take(key, 1, now); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		fail(w, http.StatusTooManyRequests, fmt.Sprintf("%s replaces its data faster than rest.device_data_rate (%g a second) allows: retry after %s", key, a.cfg.DeviceDataRate, wait.Round(time.Second)))
		return false
	}
	if wait, ok := a.allDataWrites.Take("", 1, now); !ok {
		a.dataWrites.Refund(key, 1)
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		fail(w, http.StatusTooManyRequests, fmt.Sprintf("devices replace their data faster than rest.data_writes (%g a second) allows: retry after %s", a.cfg.DataWrites, wait.Round(time.Second)))
		return false
	}
	return true
}
