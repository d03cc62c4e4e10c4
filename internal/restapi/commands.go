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
	"time"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// EventCommandSent is recorded for every command a platform app sends a device: what
// acts on the physical world is accounted for.
const EventCommandSent = "command_sent"

// CommandStore is the telemetry store's command API.
type CommandStore interface {
	InsertCommand(ctx context.Context, c telemetry.Command) (telemetry.Command, error)
	UpdateCommand(ctx context.Context, device string, id int64, u telemetry.CommandUpdate) (telemetry.Command, error)
	GetCommand(ctx context.Context, device string, id int64) (telemetry.Command, error)
	ListCommands(ctx context.Context, f telemetry.CommandFilter) ([]telemetry.Command, error)
	PollCommands(ctx context.Context, f telemetry.CommandFilter) ([]telemetry.Command, error)
	PollCommandUpdate(ctx context.Context, device string, id int64) (telemetry.Command, bool, error)
}

// commandJSON is DeviceHive's command record.
type commandJSON struct {
	ID           int64           `json:"id"`
	Command      string          `json:"command"`
	Timestamp    string          `json:"timestamp"`
	LastUpdated  string          `json:"lastUpdated"`
	UserID       int64           `json:"userId"`
	DeviceID     string          `json:"deviceId"`
	NetworkID    *int64          `json:"networkId"`
	DeviceTypeID *int64          `json:"deviceTypeId"`
	Parameters   json.RawMessage `json:"parameters"`
	Lifetime     *int            `json:"lifetime"`
	Status       *string         `json:"status"`
	Result       json.RawMessage `json:"result"`
}

func commandToJSON(c telemetry.Command) commandJSON {
	out := commandJSON{ID: c.ID, Command: c.Name, Timestamp: telemetry.FormatTime(c.Timestamp), LastUpdated: telemetry.FormatTime(c.LastUpdated),
		UserID: c.UserID, DeviceID: c.Device, Parameters: c.Parameters, Result: c.Result}
	if out.Parameters == nil {
		out.Parameters = json.RawMessage("null")
	}
	if out.Result == nil {
		out.Result = json.RawMessage("null")
	}
	if c.Lifetime > 0 {
		out.Lifetime = &c.Lifetime
	}
	if c.Status != "" {
		out.Status = &c.Status
	}
	return out
}

func commandsToJSON(cs []telemetry.Command) []commandJSON {
	out := make([]commandJSON, len(cs))
	for i, c := range cs {
		out[i] = commandToJSON(c)
	}
	return out
}

// mayReadCommands reports whether c may read device's commands: the device itself, or
// an account with +telemetry or +command on it.
func (a *API) mayReadCommands(c caller, device string) bool {
	return a.mayRead(c, device) || a.mayCommand(c, device)
}

// mayCommand reports whether c is an account with +command (or +manage) on device.
func (a *API) mayCommand(c caller, device string) bool {
	return c.device == "" && a.hub.Policy().AllowedAccount(c.accountID, device, registry.RightCommand)
}

// commandDevice returns the {id} of the path if c may read its commands, else answers
// 404 itself (a device c may not see does not exist for it).
func (a *API) commandDevice(w http.ResponseWriter, r *http.Request, c caller) (string, bool) {
	id := r.PathValue("id")
	if _, ok := a.dir.Load().Device(id); !ok || !profile.ValidName(id) || !a.mayReadCommands(c, id) {
		fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found", trim(id)))
		return "", false
	}
	return id, true
}

// pathCommand returns {id} and {cid} of the path (commandDevice), or answers 404 or 400.
func (a *API) pathCommand(w http.ResponseWriter, r *http.Request, c caller) (string, int64, bool) {
	device, ok := a.commandDevice(w, r, c)
	if !ok {
		return "", 0, false
	}
	id, err := strconv.ParseInt(r.PathValue("cid"), 10, 64)
	if err != nil {
		fail(w, http.StatusBadRequest, "command id must be a number")
		return "", 0, false
	}
	return device, id, true
}

// commandFailed answers a store error: 400 for what it refused, 404, 429 for a device
// not taking its commands, else 503 (retry).
func (a *API) commandFailed(w http.ResponseWriter, err error, what string) {
	switch {
	case refusedBeforeWrite(w, err):
	case errors.Is(err, telemetry.ErrInvalid):
		fail(w, http.StatusBadRequest, strings.TrimPrefix(strings.TrimPrefix(err.Error(), "telemetry: "), "invalid notification: "))
	case errors.Is(err, telemetry.ErrNotFound):
		fail(w, http.StatusNotFound, "command not found")
	case errors.Is(err, telemetry.ErrTooManyCommands):
		w.Header().Set("Retry-After", "60")
		fail(w, http.StatusTooManyRequests, strings.TrimPrefix(err.Error(), "telemetry: "))
	default:
		a.log.Error(what+" failed", "err", err)
		fail(w, http.StatusServiceUnavailable, what+" failed; nothing was changed, retry")
	}
}

// insertCommand is POST /device/{id}/command: an account with +command sends the
// device a command.
func (a *API) insertCommand(w http.ResponseWriter, r *http.Request, c caller) {
	if c.device != "" {
		fail(w, http.StatusForbidden, "devices do not send commands: a platform app with the +command right does")
		return
	}
	id, ok := a.commandDevice(w, r, c)
	if !ok {
		return
	}
	if !a.mayCommand(c, id) {
		fail(w, http.StatusForbidden, fmt.Sprintf("account %s may not send commands to %s (it needs the +command right)", c.account, id))
		return
	}
	var in struct {
		Command    string          `json:"command"`
		Parameters json.RawMessage `json:"parameters"`
		Lifetime   *int            `json:"lifetime"`
		Status     *string         `json:"status"`
		Result     json.RawMessage `json:"result"`
	}
	if !a.decode(w, r, &in) {
		return
	}
	if in.Command == "" {
		fail(w, http.StatusBadRequest, `give "command": the command's name`)
		return
	}
	cmd := telemetry.Command{Device: id, Name: in.Command, Parameters: nullIsNone(in.Parameters), Result: nullIsNone(in.Result), UserID: c.accountID}
	if in.Lifetime != nil {
		cmd.Lifetime = *in.Lifetime
	}
	if in.Status != nil {
		cmd.Status = *in.Status
	}
	got, err := a.commands.InsertCommand(r.Context(), cmd)
	if err != nil {
		a.commandFailed(w, err, "storing the command")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	if err := a.reg.AddEvent(ctx, registry.Event{Device: id, Kind: EventCommandSent, Remote: remoteAddr(r).String(),
		Detail: fmt.Sprintf("account %s sent command %q (id %d)", c.account, trim(got.Name), got.ID)}); err != nil {
		a.log.Error("recording a sent command in the audit log failed", "device", id, "command_id", got.ID, "err", err)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": got.ID, "timestamp": telemetry.FormatTime(got.Timestamp),
		"lastUpdated": telemetry.FormatTime(got.LastUpdated), "userId": got.UserID})
}

func nullIsNone(v json.RawMessage) json.RawMessage {
	if string(v) == "null" {
		return nil
	}
	return v
}

// updateCommand is PUT /device/{id}/command/{cid}: the device answers its command (or
// an account with +command changes it), setting status, result or both.
func (a *API) updateCommand(w http.ResponseWriter, r *http.Request, c caller) {
	id, cid, ok := a.pathCommand(w, r, c)
	if !ok {
		return
	}
	if c.device == "" && !a.mayCommand(c, id) {
		fail(w, http.StatusForbidden, fmt.Sprintf("account %s may not change %s's commands (it needs the +command right)", c.account, id))
		return
	}
	var in struct {
		Status *string         `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	if !a.decode(w, r, &in) {
		return
	}
	if _, err := a.commands.UpdateCommand(r.Context(), id, cid, telemetry.CommandUpdate{Status: in.Status, Result: nullIsNone(in.Result)}); err != nil {
		a.commandFailed(w, err, "updating the command")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getCommand is GET /device/{id}/command/{cid}.
func (a *API) getCommand(w http.ResponseWriter, r *http.Request, c caller) {
	id, cid, ok := a.pathCommand(w, r, c)
	if !ok {
		return
	}
	got, err := a.commands.GetCommand(r.Context(), id, cid)
	if err != nil {
		a.commandFailed(w, err, "reading the command")
		return
	}
	writeJSON(w, http.StatusOK, commandToJSON(got))
}

// listCommands is GET /device/{id}/command (start, end, command, status, sortField,
// sortOrder, take, skip).
func (a *API) listCommands(w http.ResponseWriter, r *http.Request, c caller) {
	id, ok := a.commandDevice(w, r, c)
	if !ok {
		return
	}
	q := r.URL.Query()
	lp, err := readListParams(q, "command")
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	f := telemetry.CommandFilter{Devices: []string{id}, Names: lp.names, Status: q.Get("status"), Start: lp.start, End: lp.end,
		SortBy: lp.sortBy, Desc: lp.desc, Take: lp.take, Skip: lp.skip}
	got, err := a.commands.ListCommands(r.Context(), f)
	if err != nil {
		a.commandFailed(w, err, "reading commands")
		return
	}
	writeJSON(w, http.StatusOK, commandsToJSON(got))
}

// pollDeviceCommands is GET /device/{id}/command/poll.
func (a *API) pollDeviceCommands(w http.ResponseWriter, r *http.Request, c caller) {
	if id, ok := a.commandDevice(w, r, c); ok {
		a.pollCommands(w, r, c, []string{id})
	}
}

// pollManyCommands is GET /device/command/poll: deviceId (one, or several
// comma-separated), or every device whose commands the caller may read.
func (a *API) pollManyCommands(w http.ResponseWriter, r *http.Request, c caller) {
	if devs, ok := a.commandDevices(w, r, c); ok {
		a.pollCommands(w, r, c, devs)
	}
}

// commandDevices reads deviceId for a poll or subscription of commands: the named
// devices (each one whose commands the caller may read; an unknown or hidden one is
// 404), or all of them; then networkIds and deviceTypeIds as devicesParam.
func (a *API) commandDevices(w http.ResponseWriter, r *http.Request, c caller) ([]string, bool) {
	devs, ok := a.namedCommandDevices(w, r, c)
	if !ok {
		return nil, false
	}
	return a.devicesInGroups(w, r, devs)
}

// namedCommandDevices is commandDevices before the group filters.
func (a *API) namedCommandDevices(w http.ResponseWriter, r *http.Request, c caller) ([]string, bool) {
	param := r.URL.Query().Get("deviceId")
	var devs []string
	switch {
	case param == "" && c.device != "":
		devs = []string{c.device}
	case param == "":
		names := a.dir.Load().Names()
		pol := a.hub.Policy()
		devs = pol.DevicesWithRight(c.accountID, registry.RightTelemetry, names)
		for _, d := range pol.DevicesWithRight(c.accountID, registry.RightCommand, names) {
			if !pol.AllowedAccount(c.accountID, d, registry.RightTelemetry) {
				devs = append(devs, d)
			}
		}
	default:
		d := a.dir.Load()
		for _, id := range strings.Split(param, ",") {
			id = strings.TrimSpace(id)
			if _, ok := d.Device(id); !ok || !profile.ValidName(id) || !a.mayReadCommands(c, id) {
				fail(w, http.StatusNotFound, fmt.Sprintf("device with id %s not found", trim(id)))
				return nil, false
			}
			devs = append(devs, id)
		}
	}
	return devs, true
}

// followCommands sends each command f selects to each as it is stored (or, with
// f.Updated, answered), oldest first, until ctx ends or each fails; rights and
// enrolments are checked on every batch as followNotifications does.
func (a *API) followCommands(ctx context.Context, c caller, devs []string, f telemetry.CommandFilter, each func(commandJSON) error) error {
	gens := a.enrolments(devs)
	for {
		got, err := a.commands.PollCommands(ctx, f)
		if err != nil || ctx.Err() != nil {
			return err
		}
		if !a.stillValid(c) || !a.enrolled(gens) {
			return errAccessEnded
		}
		d := a.dir.Load()
		for _, cmd := range got {
			if st, ok := d.Device(cmd.Device); !ok || gens[cmd.Device] != st.Gen() || !a.mayReadCommands(c, cmd.Device) {
				continue
			}
			if err := each(commandToJSON(cmd)); err != nil {
				return err
			}
		}
		if len(got) > 0 {
			last := got[len(got)-1]
			f.After = last.Timestamp
			if f.Updated {
				f.After = last.LastUpdated
			}
		}
	}
}

// pollCommands answers a long poll for the devices' new commands (or, with
// returnUpdatedCommands=true, their answers), DeviceHive's parameters: timestamp,
// names, limit, waitTimeout. Commands past their lifetime are not delivered.
func (a *API) pollCommands(w http.ResponseWriter, r *http.Request, c caller, devices []string) {
	f, err := commandPollFilter(r.URL.Query(), devices)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	wait, ok := a.waitTimeout(w, r)
	if !ok {
		return
	}
	var got []telemetry.Command
	if wait == 0 {
		got = []telemetry.Command{}
		if !f.After.IsZero() {
			got, err = a.commands.ListCommands(r.Context(), f)
		}
	} else {
		release, ok := a.holdPoll(w, c)
		if !ok {
			return
		}
		defer release()
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		got, err = a.commands.PollCommands(ctx, f)
		cancel()
	}
	if err != nil {
		a.commandFailed(w, err, "polling commands")
		return
	}
	writeJSON(w, http.StatusOK, commandsToJSON(got))
}

// commandPollFilter reads a command poll's timestamp, names, limit and
// returnUpdatedCommands (the notification poll's parameters, and which commands).
func commandPollFilter(q url.Values, devices []string) (telemetry.CommandFilter, error) {
	nf, err := pollFilter(q, devices)
	if err != nil {
		return telemetry.CommandFilter{}, err
	}
	f := telemetry.CommandFilter{Devices: devices, Names: nf.Names, After: nf.After, Take: nf.Take}
	switch v := q.Get("returnUpdatedCommands"); strings.ToLower(v) {
	case "", "false":
		f.Live = true
	case "true":
		f.Updated = true
	default:
		return f, fmt.Errorf("returnUpdatedCommands %q: want true or false", trim(v))
	}
	return f, nil
}

// pollCommandUpdate is GET /device/{id}/command/{cid}/poll: the command once it has been
// answered (at once if it has been); 204 No Content if it is not within waitTimeout.
func (a *API) pollCommandUpdate(w http.ResponseWriter, r *http.Request, c caller) {
	id, cid, ok := a.pathCommand(w, r, c)
	if !ok {
		return
	}
	wait, ok := a.waitTimeout(w, r)
	if !ok {
		return
	}
	release, ok := a.holdPoll(w, c)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	got, updated, err := a.commands.PollCommandUpdate(ctx, id, cid)
	cancel()
	switch {
	case err != nil:
		a.commandFailed(w, err, "polling the command")
	case !updated:
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, http.StatusOK, commandToJSON(got))
	}
}

// waitTimeout reads waitTimeout (seconds; default 30, bounded by rest.max_wait), or
// answers 400.
func (a *API) waitTimeout(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	v := r.URL.Query().Get("waitTimeout")
	if v == "" {
		return min(30*time.Second, a.cfg.MaxWait), true
	}
	s, err := strconv.Atoi(v)
	if err != nil || s < 0 {
		fail(w, http.StatusBadRequest, fmt.Sprintf("waitTimeout %q: want seconds from 0", trim(v)))
		return 0, false
	}
	return min(time.Duration(s)*time.Second, a.cfg.MaxWait), true
}
