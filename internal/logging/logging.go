package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// Config selects the log level ("debug", "info", "warn", "error"; "" means info) and
// format ("text" or "json"; "" means text).
type Config struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Validate names the field that is not one of its allowed values.
func (c Config) Validate() error {
	switch c.Level {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Level)
	}
	switch c.Format {
	case "", "text", "json":
	default:
		return fmt.Errorf("log.format: %q is not one of text, json", c.Format)
	}
	return nil
}

// New builds a logger writing to w; the returned LevelVar changes its level later.
func New(c Config, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lv.Set(Level(c.Level))
	opts := &slog.HandlerOptions{Level: lv}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), lv
	}
	return slog.New(slog.NewTextHandler(w, opts)), lv
}

// Level is the slog level a configuration names; anything else is info.
func Level(s string) slog.Level {
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
