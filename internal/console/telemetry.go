package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Telemetry is the telemetry store as the console reads it (nil: the hub has none).
type Telemetry interface {
	List(ctx context.Context, f telemetry.Filter) ([]telemetry.Notification, error)
	ListCommands(ctx context.Context, f telemetry.CommandFilter) ([]telemetry.Command, error)
	InsertCommand(ctx context.Context, c telemetry.Command) (telemetry.Command, error)
}

// telemetryView is a device's notifications and commands.
type telemetryView struct {
	Notifications []noteRow
	Charts        []chart
	Commands      []telemetry.Command
	Err           string
}

type noteRow struct {
	telemetry.Notification
	Params string // the parameters as text, shortened
}

// chart is one numeric parameter of one kind of notification over time, drawn on the
// server as an SVG polyline (no script, no library).
type chart struct {
	Title    string
	Points   string // "x,y x,y ..." in a 300 x 80 box
	Min, Max float64
	Last     float64
	N        int
}

const (
	chartW, chartH = 300, 80
	maxCharts      = 4
	notesShown     = 50
)

// shorten cuts a device-supplied text for a table cell (it is escaped when shown).
func shorten(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (c *Console) deviceTelemetry(ctx context.Context, device string) *telemetryView {
	if c.d.Telemetry == nil {
		return nil
	}
	tv := &telemetryView{}
	notes, err := c.d.Telemetry.List(ctx, telemetry.Filter{Devices: []string{device}, Desc: true, Take: notesShown})
	if err != nil {
		tv.Err = err.Error()
		return tv
	}
	for _, n := range notes {
		tv.Notifications = append(tv.Notifications, noteRow{Notification: n, Params: shorten(n.Parameters, 160)})
	}
	slices.Reverse(notes) // oldest first, for the charts
	tv.Charts = charts(notes)
	if tv.Commands, err = c.d.Telemetry.ListCommands(ctx, telemetry.CommandFilter{Devices: []string{device}, Desc: true, Take: 20}); err != nil {
		tv.Err = err.Error()
	}
	return tv
}

// charts finds the numeric top-level parameters of the notifications, per name.
func charts(notes []telemetry.Notification) []chart {
	type series struct{ vals []float64 }
	all := map[string]*series{}
	var order []string
	for _, n := range notes {
		var obj map[string]any
		if json.Unmarshal(n.Parameters, &obj) != nil {
			continue
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, ok := obj[k].(float64)
			if !ok || math.IsInf(v, 0) || math.IsNaN(v) {
				continue
			}
			title := n.Name + " · " + k
			s := all[title]
			if s == nil {
				if len(order) == maxCharts {
					continue
				}
				s = &series{}
				all[title] = s
				order = append(order, title)
			}
			s.vals = append(s.vals, v)
		}
	}
	var out []chart
	for _, title := range order {
		vals := all[title].vals
		if len(vals) < 2 {
			continue
		}
		lo, hi := slices.Min(vals), slices.Max(vals)
		span := hi - lo
		if span == 0 {
			span = 1
		}
		var pts strings.Builder
		for i, v := range vals {
			x := float64(i) * chartW / float64(len(vals)-1)
			y := chartH - 4 - (v-lo)/span*(chartH-8)
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		}
		out = append(out, chart{Title: title, Points: strings.TrimSpace(pts.String()), Min: lo, Max: hi, Last: vals[len(vals)-1], N: len(vals)})
	}
	return out
}

// command sends the device a command from the console (+operate; its answer shows on
// the device's page when the device gives one).
func (c *Console) command(w http.ResponseWriter, r *http.Request, cl caller) {
	name := r.PathValue("name")
	if _, err := c.visibleDevice(r.Context(), cl, name); err != nil {
		c.fail(w, http.StatusNotFound, "no such device")
		return
	}
	if !c.d.Policy().AllowedAccount(cl.ID, name, registry.RightOperate) {
		c.fail(w, http.StatusForbidden, "a command needs +operate on "+name)
		return
	}
	if c.d.Telemetry == nil {
		c.fail(w, http.StatusNotFound, "this hub keeps no telemetry: commands need it (docs/telemetry.md)")
		return
	}
	cmd := telemetry.Command{Device: name, Name: strings.TrimSpace(r.PostFormValue("command"))}
	if p := strings.TrimSpace(r.PostFormValue("parameters")); p != "" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(p)); err != nil {
			c.fail(w, http.StatusBadRequest, "parameters: not JSON: "+err.Error())
			return
		}
		cmd.Parameters = buf.Bytes()
	}
	sent, err := c.d.Telemetry.InsertCommand(r.Context(), cmd)
	if errors.Is(err, telemetry.ErrInvalid) {
		c.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.audit1(r.Context(), cl, name, fmt.Sprintf("command %d %q", sent.ID, sent.Name))
	http.Redirect(w, r, "/console/devices/"+url.PathEscape(name)+"?done="+url.QueryEscape(fmt.Sprintf("command %d sent", sent.ID)), http.StatusSeeOther)
}

// jsonText shows a JSON value as text (escaped by the template).
func jsonText(b json.RawMessage) string {
	if len(b) == 0 {
		return ""
	}
	return shorten(b, 200)
}
