package resolver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/iotsafe/iotsafe/internal/profile"
)

// MaxLine bounds one request line, newline included.
const MaxLine = 512

// Error codes on the wire.
const (
	CodeDenied      = "denied"
	CodeNotFound    = "notfound"
	CodeBadRequest  = "badrequest"
	CodeUnavailable = "unavailable"
)

// Request asks for one device service.
type Request struct {
	Device string
	Alias  string
}

// ParseRequest parses one line (without its newline).
func ParseRequest(line string) (Request, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Request{}, errors.New("empty request")
	}
	if f[0] != "RESOLVE" {
		return Request{}, fmt.Errorf("unknown verb %.20q: want RESOLVE <device> <alias>", f[0])
	}
	if len(f) != 3 {
		return Request{}, errors.New("want RESOLVE <device> <alias>")
	}
	if !profile.ValidName(f[1]) || !profile.ValidName(f[2]) {
		return Request{}, errors.New("device and alias are lower-case letters, digits and '-'")
	}
	return Request{Device: f[1], Alias: f[2]}, nil
}

// Error is a refusal with its wire code.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// formatAnswer renders a reply line.
func formatAnswer(addr string, err error) string {
	if err == nil {
		return "OK " + addr + "\n"
	}
	var re *Error
	if !errors.As(err, &re) {
		re = &Error{Code: CodeUnavailable, Msg: err.Error()}
	}
	// One line, whatever the message holds.
	msg := strings.NewReplacer("\n", " ", "\r", " ").Replace(re.Msg)
	return "ERR " + re.Code + " " + msg + "\n"
}

// parseAnswer reads a reply line (client side).
func parseAnswer(line string) (string, error) {
	line = strings.TrimRight(line, "\r\n")
	if addr, ok := strings.CutPrefix(line, "OK "); ok {
		return addr, nil
	}
	if rest, ok := strings.CutPrefix(line, "ERR "); ok {
		code, msg, _ := strings.Cut(rest, " ")
		return "", &Error{Code: code, Msg: msg}
	}
	return "", fmt.Errorf("resolver: unexpected answer %.80q", line)
}
