package telemetry

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors callers branch on.
var (
	// ErrOverloaded means the write queue is full: try again shortly.
	ErrOverloaded = errors.New("telemetry: store overloaded")
	// ErrNotFound is returned for an id that does not exist (for that device).
	ErrNotFound = errors.New("telemetry: not found")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("telemetry: store closed")
	// ErrInvalid marks a notification the store refuses (empty name, oversized fields).
	ErrInvalid = errors.New("telemetry: invalid notification")
)

// Limits on one notification's fields.
const (
	MaxNameLen       = 128
	MaxParametersLen = 64 << 10
)

// Notification is one message from a device.
type Notification struct {
	ID     int64  // assigned by the store; increases per hub
	Device string // the registry's device name
	Name   string // DeviceHive's "notification"
	// Parameters is a JSON value, or nil for none.
	Parameters json.RawMessage
	// Timestamp is the hub's time of storing, unique and increasing per hub, so it is
	// a lossless cursor for polling (DeviceHive clients poll by timestamp).
	Timestamp time.Time
	// DeviceTime is the time the device gave, if it gave one.
	DeviceTime *time.Time
	// Via names the path that carried it in ("mqtt"), for the store's subscribers: not
	// stored, so a notification read back from the table, or another hub's, has none.
	Via string
}

// Validate checks what the store requires of a notification before queuing it.
func (n *Notification) Validate() error {
	switch {
	case n.Device == "":
		return fmt.Errorf("%w: no device", ErrInvalid)
	case n.Name == "":
		return fmt.Errorf("%w: the notification name is empty", ErrInvalid)
	case len(n.Name) > MaxNameLen:
		return fmt.Errorf("%w: the notification name is longer than %d bytes", ErrInvalid, MaxNameLen)
	case len(n.Parameters) > MaxParametersLen:
		return fmt.Errorf("%w: parameters are larger than %d bytes", ErrInvalid, MaxParametersLen)
	case n.Parameters != nil && !json.Valid(n.Parameters):
		return fmt.Errorf("%w: parameters are not valid JSON", ErrInvalid)
	}
	return nil
}

// size is what the notification costs a device's byte budget.
func (n *Notification) size() int { return len(n.Name) + len(n.Parameters) }

// TimeLayout is how timestamps are written: DeviceHive's layout (UTC, no zone) with
// microseconds, so per-hub timestamps stay unique at high rates.
const TimeLayout = "2006-01-02T15:04:05.000000"

// FormatTime writes t in TimeLayout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ParseTime reads a DeviceHive timestamp: "2006-01-02T15:04:05" with 0 to 9 fractional
// digits, UTC, with or without a trailing "Z" (RFC 3339 offsets are accepted too).
func ParseTime(s string) (time.Time, error) {
	if len(s) > 64 {
		return time.Time{}, fmt.Errorf("timestamp %.20q...: too long", s)
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse("2006-01-02T15:04:05.999999999", strings.TrimSuffix(s, "Z"))
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q: want YYYY-MM-DDTHH:MM:SS[.ffffff] in UTC", s)
	}
	return t.UTC(), nil
}

// Sort orders of a query.
const (
	SortByID           = "id"
	SortByTimestamp    = "timestamp"
	SortByNotification = "notification"
	SortByDevice       = "deviceId"
)

// Filter selects notifications. Zero fields do not filter.
type Filter struct {
	// Devices restricts to these devices; nil means any device. An empty non-nil slice
	// matches nothing (an account that may see no device).
	Devices []string
	// Names restricts to these notification names.
	Names []string
	// After is exclusive (the poll cursor); Start and End are inclusive.
	After, Start, End time.Time
	// SortBy is one of the SortBy constants ("" means timestamp); Desc reverses it.
	SortBy string
	Desc   bool
	// Take bounds the result (0 means DefaultTake, at most MaxTake); Skip skips the first.
	Take, Skip int
}

// Defaults and bounds of a query.
const (
	DefaultTake = 100
	MaxTake     = 1000
)

func (f *Filter) normalize() error {
	switch f.SortBy {
	case "", SortByTimestamp, SortByID, SortByNotification, SortByDevice:
	default:
		return fmt.Errorf("%w: sortField %q: want id, timestamp, notification or deviceId", ErrInvalid, f.SortBy)
	}
	if f.Take < 0 || f.Skip < 0 {
		return fmt.Errorf("%w: take and skip must not be negative", ErrInvalid)
	}
	if f.Take == 0 {
		f.Take = DefaultTake
	}
	f.Take = min(f.Take, MaxTake)
	return nil
}

// matches reports whether n passes f's selection (not its paging).
func (f *Filter) matches(n *Notification) bool {
	if f.Devices != nil && !slices.Contains(f.Devices, n.Device) {
		return false
	}
	if f.Names != nil && !slices.Contains(f.Names, n.Name) {
		return false
	}
	if !f.After.IsZero() && !n.Timestamp.After(f.After) {
		return false
	}
	if !f.Start.IsZero() && n.Timestamp.Before(f.Start) {
		return false
	}
	if !f.End.IsZero() && n.Timestamp.After(f.End) {
		return false
	}
	return true
}
