package hub

import (
	"io"
	"log/slog"
)

// NewLogger builds the hub's logger; the returned LevelVar lets SIGHUP change the level.
func NewLogger(c LogConfig, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lv.Set(parseLevel(c.Level))
	opts := &slog.HandlerOptions{Level: lv}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), lv
	}
	return slog.New(slog.NewTextHandler(w, opts)), lv
}

func parseLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
