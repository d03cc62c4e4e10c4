package restapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// apiError is DeviceHive's error body: {"error": CODE, "message": "..."}.
type apiError struct {
	Code    int    `json:"error"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	// Canonical keys set directly: every answer passes here.
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(code)
	if v != nil {
		json.NewEncoder(w).Encode(v)
	}
}

func fail(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="iotsafe"`)
	}
	writeJSON(w, code, apiError{Code: code, Message: msg})
}

// refusedBeforeWrite answers what the store refused before writing: a device over its
// rate budget (429) or a disk nearly full (503); ok is false for any other error.
func refusedBeforeWrite(w http.ResponseWriter, err error) (ok bool) {
	var rate *telemetry.RateError
	switch {
	case errors.As(err, &rate):
		w.Header().Set("Retry-After", strconv.Itoa(int(rate.RetryAfter.Seconds())))
		fail(w, http.StatusTooManyRequests, rate.Error())
	case errors.Is(err, telemetry.ErrDiskFull):
		w.Header().Set("Retry-After", "60")
		fail(w, http.StatusServiceUnavailable, "the hub's disk is nearly full: nothing was stored; retry later")
	default:
		return false
	}
	return true
}

// overloaded answers 503 with a Retry-After: the store's queue is full.
func overloaded(w http.ResponseWriter, retryAfter int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	fail(w, http.StatusServiceUnavailable, "the hub is storing as fast as it can; retry after "+strconv.Itoa(retryAfter)+" s")
}
