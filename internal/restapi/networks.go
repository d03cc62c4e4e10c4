package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// DeviceHive's networks and device types are device groups here (network:NAME,
// devicetype:NAME) with the numeric ids its API carries, kept in the registry: this
// package reads them per request, never keeps a copy. Membership comes from the access
// policy's snapshot, which the hub reloads on every change of device groups.

// groupKinds are DeviceHive's resources over device groups: the REST path, and the
// JSON key of a device's id of one.
var groupKinds = map[string]struct{ path, deviceKey string }{
	registry.GroupNetwork:    {"network", "networkId"},
	registry.GroupDeviceType: {"devicetype", "deviceTypeId"},
}

// catalog is the networks and device types, by group and by kind and id.
type catalog struct {
	byGroup map[string]registry.GroupInfo
	byID    map[string]map[int64]registry.GroupInfo
}

// catalog reads the networks and device types.
func (a *API) catalog(ctx context.Context) (catalog, error) {
	cat := catalog{byGroup: map[string]registry.GroupInfo{}, byID: map[string]map[int64]registry.GroupInfo{}}
	for kind := range groupKinds {
		gis, err := a.reg.GroupInfos(ctx, kind)
		if err != nil {
			return cat, err
		}
		cat.byID[kind] = map[int64]registry.GroupInfo{}
		for _, gi := range gis {
			cat.byGroup[gi.Group], cat.byID[kind][gi.ID] = gi, gi
		}
	}
	return cat, nil
}

// ids are the network and device type ids of a device in groups (nil: none).
func (cat catalog) ids(groups []string) (network, deviceType *int64) {
	for _, g := range groups {
		if gi, ok := cat.byGroup[g]; ok {
			id := gi.ID
			if gi.Kind == registry.GroupNetwork {
				network = &id
			} else {
				deviceType = &id
			}
		}
	}
	return network, deviceType
}

// groupJSON is DeviceHive's network and device type.
type groupJSON struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// groupVisible reports whether c is told about group g: a device about its own, an
// account about one a grant of its names (or @all), or one holding a device it reads.
func (a *API) groupVisible(c caller, g string) bool {
	members := a.hub.Policy().DeviceGroups()
	if c.device != "" {
		return slices.Contains(members[c.device], g)
	}
	if a.hub.Policy().NamesGroup(c.accountID, g) {
		return true
	}
	for d, gs := range members {
		if slices.Contains(gs, g) && a.mayRead(c, d) {
			return true
		}
	}
	return false
}

// listGroups is GET /network and GET /devicetype: name, namePattern, sortField (id,
// name), sortOrder, take, skip.
func (a *API) listGroups(kind string) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, c caller) {
		q := r.URL.Query()
		take, skip, err := paging(q.Get("take"), q.Get("skip"))
		if err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		sf := q.Get("sortField")
		if sf != "" && sf != "id" && sf != "name" {
			fail(w, http.StatusBadRequest, fmt.Sprintf("sortField %q: want id or name", trim(sf)))
			return
		}
		gis, err := a.reg.GroupInfos(r.Context(), kind)
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "reading the "+kind+"s failed; retry")
			return
		}
		name, pattern := q.Get("name"), q.Get("namePattern")
		var out []groupJSON
		for _, gi := range gis {
			if (name == "" || gi.Name == name) && (pattern == "" || likeMatch(pattern, gi.Name)) && a.groupVisible(c, gi.Group) {
				out = append(out, groupJSON{ID: gi.ID, Name: gi.Name, Description: gi.Description})
			}
		}
		if sf == "name" {
			slices.SortFunc(out, func(x, y groupJSON) int { return strings.Compare(x.Name, y.Name) })
		}
		if strings.EqualFold(q.Get("sortOrder"), "DESC") {
			slices.Reverse(out)
		}
		out = out[min(skip, len(out)):]
		writeJSON(w, http.StatusOK, append([]groupJSON{}, out[:min(take, len(out))]...))
	}
}

// pathGroup is the network or device type {id} names, if c may see it; else it answered
// 404.
func (a *API) pathGroup(w http.ResponseWriter, r *http.Request, c caller, kind string) (registry.GroupInfo, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err == nil {
		var cat catalog
		if cat, err = a.catalog(r.Context()); err != nil {
			fail(w, http.StatusServiceUnavailable, "reading the "+kind+"s failed; retry")
			return registry.GroupInfo{}, false
		}
		if gi, ok := cat.byID[kind][id]; ok && a.groupVisible(c, gi.Group) {
			return gi, true
		}
	}
	fail(w, http.StatusNotFound, fmt.Sprintf("%s with id %s not found", groupKinds[kind].path, trim(r.PathValue("id"))))
	return registry.GroupInfo{}, false
}

// getGroup is GET /network/{id} and GET /devicetype/{id}.
func (a *API) getGroup(kind string) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, c caller) {
		if gi, ok := a.pathGroup(w, r, c, kind); ok {
			writeJSON(w, http.StatusOK, groupJSON{ID: gi.ID, Name: gi.Name, Description: gi.Description})
		}
	}
}

// mayShapeGroups answers 403 unless c is an account with +manage on @all: making and
// removing networks and device types is the whole fleet's business.
func (a *API) mayShapeGroups(w http.ResponseWriter, c caller, kind string) bool {
	if c.device == "" && a.hub.Policy().AllowedAccountAll(c.accountID, registry.RightManage) {
		return true
	}
	fail(w, http.StatusForbidden, fmt.Sprintf("%s may not make or remove %ss: that takes +manage on @all ('iotsafe %s add' on the hub does it too)", c, groupKinds[kind].path, kind))
	return false
}

// insertGroup is POST /network and POST /devicetype: {"name", "description"} → 201
// {"id"}.
func (a *API) insertGroup(kind string) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, c caller) {
		var in struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		}
		if !a.decode(w, r, &in) || !a.mayShapeGroups(w, c, kind) || !a.mayWriteData(w, c) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		gi, err := a.hub.AddGroup(ctx, kind, in.Name, in.Description)
		switch {
		case errors.Is(err, registry.ErrExists):
			fail(w, http.StatusConflict, fmt.Sprintf("%s %s exists", groupKinds[kind].path, trim(in.Name)))
		case err != nil:
			fail(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "registry: "))
		default:
			writeJSON(w, http.StatusCreated, map[string]int64{"id": gi.ID})
		}
	}
}

// deleteGroup is DELETE /network/{id} and DELETE /devicetype/{id}: only an empty one.
func (a *API) deleteGroup(kind string) func(http.ResponseWriter, *http.Request, caller) {
	return func(w http.ResponseWriter, r *http.Request, c caller) {
		gi, ok := a.pathGroup(w, r, c, kind)
		if !ok || !a.mayShapeGroups(w, c, kind) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		switch err := a.hub.RemoveGroup(ctx, gi.Group); {
		case errors.Is(err, registry.ErrGroupNotEmpty):
			fail(w, http.StatusConflict, strings.TrimPrefix(err.Error(), "registry: not empty: "))
		case err != nil:
			fail(w, http.StatusServiceUnavailable, "removing failed: "+err.Error())
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

// groupFilters are the query parameters that select devices by network or device type:
// on GET /device one id or name each, on polls, streams and subscriptions lists of ids.
var (
	deviceListFilters = []string{"networkId", "networkName", "deviceTypeId", "deviceTypeName"}
	followFilters     = []string{"networkIds", "deviceTypeIds"}
	allGroupFilters   = slices.Concat(deviceListFilters, followFilters)
)

// unsupportedFilter is the first group filter r names that its call does not take (a
// filter is applied or refused, never ignored), or "".
func unsupportedFilter(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	var takes []string
	switch strings.TrimPrefix(r.URL.Path, Prefix) {
	case "/device":
		takes = deviceListFilters
	case "/device/notification/poll", "/device/command/poll", "/device/notification/stream":
		takes = followFilters
	}
	for k := range r.URL.Query() {
		for _, f := range allGroupFilters {
			if strings.EqualFold(k, f) && !slices.Contains(takes, k) {
				return k
			}
		}
	}
	return ""
}

// inGroups keeps the devices of devs in the networks and device types q's networkIds
// and deviceTypeIds name (comma-separated ids); an id nobody has matches nothing.
func (a *API) inGroups(ctx context.Context, q url.Values, devs []string) ([]string, error) {
	want := map[string][]string{}
	for kind, key := range map[string]string{registry.GroupNetwork: "networkIds", registry.GroupDeviceType: "deviceTypeIds"} {
		if v := q.Get(key); v != "" {
			for _, s := range strings.Split(v, ",") {
				id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s %q: want comma-separated ids", key, trim(v))
				}
				want[kind] = append(want[kind], strconv.FormatInt(id, 10))
			}
		}
	}
	if len(want) == 0 {
		return devs, nil
	}
	cat, err := a.catalog(ctx)
	if err != nil {
		return nil, err
	}
	members := a.hub.Policy().DeviceGroups()
	out := []string{}
	for _, d := range devs {
		if matchesGroups(cat, members[d], want) {
			out = append(out, d)
		}
	}
	return out, nil
}

// matchesGroups reports whether a device in groups is in one of want's ids of each kind
// want names.
func matchesGroups(cat catalog, groups []string, want map[string][]string) bool {
	for kind, ids := range want {
		found := false
		for _, g := range groups {
			if gi, ok := cat.byGroup[g]; ok && gi.Kind == kind && slices.Contains(ids, strconv.FormatInt(gi.ID, 10)) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// listFilter is GET /device's networkId, networkName, deviceTypeId, deviceTypeName, as
// the ids they select (want, for matchesGroups); ok is false when one names nothing
// (the list is empty).
func listFilter(cat catalog, q url.Values) (want map[string][]string, ok bool, err error) {
	want = map[string][]string{}
	for kind, keys := range map[string][2]string{registry.GroupNetwork: {"networkId", "networkName"}, registry.GroupDeviceType: {"deviceTypeId", "deviceTypeName"}} {
		if v := q.Get(keys[0]); v != "" {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, false, fmt.Errorf("%s %q: want an id", keys[0], trim(v))
			}
			want[kind] = append(want[kind], strconv.FormatInt(id, 10))
		}
		if v := q.Get(keys[1]); v != "" {
			gi, found := cat.byGroup[kind+":"+v]
			if !found {
				return nil, false, nil
			}
			if ids := want[kind]; len(ids) > 0 && ids[0] != strconv.FormatInt(gi.ID, 10) {
				return nil, false, nil
			}
			want[kind] = []string{strconv.FormatInt(gi.ID, 10)}
		}
	}
	return want, true, nil
}

// groupsFromBody reads a device body's networkId and deviceTypeId (null or absent: no
// change) as the groups they name; an id nobody has is refused.
func groupsFromBody(cat catalog, in deviceBody) (map[string]string, error) {
	out := map[string]string{}
	for kind, raw := range map[string]json.RawMessage{registry.GroupNetwork: in.NetworkID, registry.GroupDeviceType: in.DeviceTypeID} {
		if isNull(raw) {
			continue
		}
		var id int64
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, fmt.Errorf("%s: want a %s's id (a number)", groupKinds[kind].deviceKey, groupKinds[kind].path)
		}
		gi, ok := cat.byID[kind][id]
		if !ok {
			return nil, fmt.Errorf("%s with id %d not found ('iotsafe %s add NAME', or POST %s/%s, makes one)", groupKinds[kind].path, id, kind, Prefix, groupKinds[kind].path)
		}
		out[kind] = gi.Group
	}
	return out, nil
}

// withGroups is groups with its network and device type replaced by those of set.
func withGroups(groups []string, set map[string]string) []string {
	out := []string{}
	for _, g := range groups {
		if _, replaced := set[registry.GroupKind(g)]; !replaced {
			out = append(out, g)
		}
	}
	for _, g := range set {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}
