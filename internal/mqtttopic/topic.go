package mqtttopic

import (
	"errors"
	"strings"
)

// ValidFilter checks an MQTT topic filter: not empty, '#' only as the last level, '+'
// and '#' only as whole levels, no NUL, no $-topics (the brokers' own).
func ValidFilter(f string) error {
	if f == "" || len(f) > 65535 {
		return errors.New("empty or too long")
	}
	if strings.HasPrefix(f, "$") {
		return errors.New("$ topics are the broker's own")
	}
	if strings.ContainsRune(f, 0) {
		return errors.New("a NUL in a topic")
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return errors.New("'#' must be the last level")
		case l != "#" && l != "+" && strings.ContainsAny(l, "#+"):
			return errors.New("a wildcard must be a whole level")
		}
	}
	return nil
}

// Match reports whether a topic matches a valid filter.
func Match(filter, topic string) bool {
	fl, tl := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, f := range fl {
		if f == "#" {
			return true
		}
		if i >= len(tl) || f != "+" && f != tl[i] {
			return false
		}
	}
	return len(fl) == len(tl)
}

// Overlap reports whether two valid filters can match one topic.
func Overlap(a, b string) bool {
	al, bl := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(al) && i < len(bl); i++ {
		x, y := al[i], bl[i]
		if x == "#" || y == "#" {
			return true
		}
		if x != "+" && y != "+" && x != y {
			return false
		}
	}
	if len(al) == len(bl) {
		return true
	}
	// One is longer: only a trailing '#' on the longer one matches the parent level too
	// ("a/#" matches "a").
	long := al
	if len(bl) > len(al) {
		long = bl
	}
	short := min(len(al), len(bl))
	return len(long) == short+1 && long[short] == "#"
}

// SharePrefix starts a shared subscription's filter: $share/GROUP/FILTER (MQTT 5 §4.8.2).
const SharePrefix = "$share/"

// Unshare returns the filter a shared subscription covers: FILTER of $share/GROUP/FILTER,
// where GROUP is a non-empty level without wildcards. shared is false for any other
// filter (returned as it is); err is set for a $share filter that is malformed.
func Unshare(f string) (filter string, shared bool, err error) {
	rest, ok := strings.CutPrefix(f, SharePrefix)
	if !ok {
		return f, false, nil
	}
	group, filter, ok := strings.Cut(rest, "/")
	if !ok || group == "" || strings.ContainsAny(group, "+#") || filter == "" {
		return "", true, errors.New("a shared subscription is $share/GROUP/FILTER, GROUP a name without wildcards")
	}
	return filter, true, nil
}
