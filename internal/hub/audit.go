package hub

import (
	"context"
	"fmt"
	"os"
	"time"
)

// recordStart closes in the audit log the sessions the previous run left open, says
// whether it ended without a clean stop, and records this start.
func (h *Hub) recordStart(ctx context.Context) {
	open, crashed, err := h.reg.RecordStart(ctx, fmt.Sprintf("pid %d", os.Getpid()))
	if err != nil {
		h.log.Error("recording the start failed", "err", err)
		return
	}
	h.recorded = true
	if crashed {
		h.log.Warn("the previous run ended without a clean stop (crash or kill)", "event", "hub_crash_recovered", "sessions_closed_in_log", len(open))
	} else if len(open) > 0 {
		h.log.Info("closed in the audit log the sessions the previous run left open", "sessions", len(open))
	}
}

// pruneAudit applies audit.max_events and audit.retention now and every interval.
func (h *Hub) pruneAudit(ctx context.Context, every time.Duration) {
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := h.reg.PruneEvents(pctx, h.cfg.Audit.MaxEvents, time.Now().Add(-h.cfg.Audit.Retention))
		cancel()
		if err := CheckFreeSpace(h.dir, h.cfg.Audit.MinFreeMiB); err != nil {
			h.log.Warn("the data folder is nearly full: enrolments are refused", "event", "low_space", "err", err)
		}
		switch {
		case err != nil:
			h.log.Warn("pruning the audit log failed", "err", err)
		case n > 0:
			h.log.Info("pruned the audit log", "deleted", n, "max_events", h.cfg.Audit.MaxEvents, "retention", h.cfg.Audit.Retention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
