package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// Config selects the log level ("debug", "info", "warn", "error"; "" means info) and
// format ("text" or "json"; "" means text).
type Config struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
	// Journal is set by the caller when the writer is systemd's journal: each line then
	// starts with its syslog priority (<3> error, <4> warning, <6> info, <7> debug), so
	// 'journalctl -p warning' finds what matters, and text lines leave out the time,
	// which the journal records itself.
	Journal bool `yaml:"-"`
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
	var pw *priorityWriter
	if c.Journal {
		pw = &priorityWriter{w: w}
		w = pw
		if c.Format != "json" {
			opts.ReplaceAttr = dropTime
		}
	}
	var h slog.Handler
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	if pw != nil {
		h = &journalHandler{h: h, pw: pw}
	}
	return slog.New(h), lv
}

// dropTime leaves the record's time out of a text line.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// priorityWriter puts the priority of the record being written before its line. slog's
// handlers write each record with one Write, which journalHandler makes while holding mu
// with prio set.
type priorityWriter struct {
	w    io.Writer
	mu   sync.Mutex
	prio string
}

func (p *priorityWriter) Write(b []byte) (int, error) {
	line := make([]byte, 0, len(p.prio)+len(b))
	line = append(append(line, p.prio...), b...)
	if _, err := p.w.Write(line); err != nil {
		return 0, err
	}
	return len(b), nil
}

// journalHandler writes through a priorityWriter (shared by the handlers WithAttrs and
// WithGroup derive).
type journalHandler struct {
	h  slog.Handler
	pw *priorityWriter
}

func (j *journalHandler) Enabled(ctx context.Context, l slog.Level) bool { return j.h.Enabled(ctx, l) }

func (j *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	j.pw.mu.Lock()
	defer j.pw.mu.Unlock()
	j.pw.prio = priority(r.Level)
	return j.h.Handle(ctx, r)
}

func (j *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{h: j.h.WithAttrs(as), pw: j.pw}
}

func (j *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{h: j.h.WithGroup(name), pw: j.pw}
}

// priority is the syslog priority prefix of sd-daemon(3) for a level.
func priority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
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
