package uplink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/agent"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Telemetry is the gateway's notification store as the relay reads it
// (*telemetry.Store).
type Telemetry interface {
	Identity(ctx context.Context) (string, error)
	After(ctx context.Context, id int64, limit int) ([]telemetry.Notification, error)
	NextCommit() <-chan struct{}
	// SetRelayedUpTo tells the store what the centre has, so its retention counts what
	// it deletes before the centre got it; persist writes it down too.
	SetRelayedUpTo(ctx context.Context, id int64, persist bool) error
	// RestartRelayAt sets and writes down the centre's mark at a session's start, even
	// below the last one, and returns the mark it replaced.
	RestartRelayAt(ctx context.Context, id int64) (previous int64, err error)
}

// relayPersistEvery is how often the relay writes the centre's mark into the gateway's
// store while batches flow (each write is a commit of its own), and it writes it when
// it runs out of batches.
const relayPersistEvery = time.Second

// RelayStatus is the relay's part of Status.
type RelayStatus struct {
	State      string `json:"state"` // off, starting, relaying, retrying, refused
	Relayed    int64  `json:"relayed"`
	Duplicates int64  `json:"duplicates,omitempty"`
	Refused    int64  `json:"refused,omitempty"` // notifications the centre did not take
	Mark       int64  `json:"mark"`              // the last id of this store the centre has
	LastError  string `json:"last_error,omitempty"`
}

// relayIdle bounds a wait for the next commit: a safety net, as NextCommit wakes it.
const relayIdle = 30 * time.Second

// errRelayRefused: the centre keeps no notifications, or not this gateway's; the relay
// rests until the next session.
var errRelayRefused = errors.New("the centre refused relayed notifications (does it run a telemetry path? is this a gateway profile?)")

// relay hands the gateway's notifications to the centre in id order, one batch at a
// time, from where the centre's store is, until the session ends. Its steps: learn the
// centre's mark (handshake), restart the store's relay from it (restartAt), then send
// batch after batch (send), resting while there is nothing new (idle).
func (u *Uplink) relay(ctx context.Context, conn ssh.Conn, ended <-chan struct{}) {
	u.setRelay(func(r *RelayStatus) { r.State, r.LastError = "starting", "" })
	defer u.setRelay(func(r *RelayStatus) {
		if r.State != "refused" {
			r.State = "waiting for the centre"
		}
	})
	run := &relayRun{u: u, conn: conn, ended: ended, store: u.cfg.Telemetry, told: map[string]bool{}}
	for attempt := 0; ; attempt++ {
		err := run.handshake(ctx)
		if err == nil {
			break
		}
		if !u.relayWait(ctx, ended, err, attempt) {
			return
		}
	}
	u.setRelay(func(r *RelayStatus) { r.State, r.Mark = "relaying", run.mark })
	u.log.Info("relaying notifications to the centre", "store", run.source, "from_id", run.mark)
	run.restartAt(ctx)
	defer run.persist(true)
	attempt := 0
	for {
		next := run.store.NextCommit()
		batch, err := u.nextBatch(ctx, run.source, run.mark)
		switch {
		case err == nil && batch.Upto == uint64(run.mark):
			if !run.idle(ctx, next) {
				return
			}
			continue
		case err == nil:
			err = run.send(ctx, batch)
		}
		if err != nil {
			if !u.relayWait(ctx, ended, err, attempt) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
	}
}

// relayRun is one session's relay: where the centre is (mark), and what of it the
// gateway's store has on disk.
type relayRun struct {
	u     *Uplink
	conn  ssh.Conn
	ended <-chan struct{}
	store Telemetry

	source    string // the gateway store's identity
	mark      int64  // the highest id the centre holds
	persisted time.Time
	unsaved   bool            // mark moved since it was last written
	told      map[string]bool // devices whose refusal was logged this session
}

// handshake asks the centre for its mark of this gateway's store.
func (r *relayRun) handshake(ctx context.Context) (err error) {
	if r.source, err = r.store.Identity(ctx); err != nil {
		return err
	}
	ok, body, err := r.conn.SendRequest(sshext.TelemetryMarkRequest, true, ssh.Marshal(sshext.TelemetryMark{Source: r.source}))
	if err != nil {
		return err
	}
	var m sshext.TelemetryMarkReply
	if !ok || ssh.Unmarshal(body, &m) != nil {
		return errRelayRefused
	}
	r.mark = int64(m.Upto)
	return nil
}

// restartAt records the centre's answer as the relay's mark: what it has now, even
// below what it acknowledged before.
func (r *relayRun) restartAt(ctx context.Context) {
	r.persisted = time.Now()
	prev, err := r.store.RestartRelayAt(ctx, r.mark)
	switch {
	case err != nil:
		r.u.log.Warn("recording the centre's mark in the store failed", "err", err)
		r.unsaved = true
	case prev > r.mark:
		r.u.log.Warn("the centre has fewer of this gateway's notifications than it acknowledged (restored from a backup?); sending the rest again",
			"acknowledged_id", prev, "centre_id", r.mark)
	}
}

// persist writes the mark to disk: at once when force, else at most every
// relayPersistEvery.
func (r *relayRun) persist(force bool) {
	if !r.unsaved || !force && time.Since(r.persisted) < relayPersistEvery {
		return
	}
	// Its own context: the last write, as the hub stops, is the one a restart reads.
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.store.SetRelayedUpTo(wctx, r.mark, true); err != nil {
		if !errors.Is(err, telemetry.ErrClosed) {
			r.u.log.Warn("recording the centre's mark in the store failed", "err", err)
		}
		return
	}
	r.persisted, r.unsaved = time.Now(), false
}

// idle rests until the store commits again (or relayIdle passes); false when the
// session or the hub ended meanwhile.
func (r *relayRun) idle(ctx context.Context, next <-chan struct{}) bool {
	r.persist(true)
	t := time.NewTimer(relayIdle)
	defer t.Stop()
	select {
	case <-next:
	case <-t.C:
	case <-r.ended:
	case <-ctx.Done():
	}
	return ctx.Err() == nil && !isClosed(r.ended)
}

// send hands the centre one batch and takes in its answer: the new mark, the counts, and
// the devices it refused.
func (r *relayRun) send(ctx context.Context, batch sshext.TelemetryBatch) error {
	ack, err := r.u.sendBatch(r.conn, batch)
	if err == nil && ack.Retry {
		err = errors.New("the centre could not store the batch now")
	}
	if err != nil {
		return err
	}
	r.mark = max(r.mark, int64(ack.Upto))
	_ = r.store.SetRelayedUpTo(ctx, r.mark, false) // in memory only: cannot fail
	r.unsaved = true
	r.persist(false)
	refused := int64(len(batch.Items)) - int64(ack.Stored) - int64(ack.Duplicates)
	r.u.setRelay(func(s *RelayStatus) {
		s.State, s.Mark, s.LastError = "relaying", r.mark, ""
		s.Relayed += int64(ack.Stored)
		s.Duplicates += int64(ack.Duplicates)
		s.Refused += max(refused, 0)
	})
	r.u.log.Debug("notifications relayed", "stored", ack.Stored, "duplicates", ack.Duplicates, "mark", r.mark)
	r.refusals(ctx, ack.Refused)
	return nil
}

// refusals logs the devices the centre refused (once a session at warning level: a
// device sending every second would flood the log) and closes those revoked there.
func (r *relayRun) refusals(ctx context.Context, refused []sshext.TelemetryRefusal) {
	for _, f := range refused {
		level := slog.LevelWarn
		if r.told[f.Device] {
			level = slog.LevelDebug
		} else if len(r.told) < 10000 {
			r.told[f.Device] = true
		}
		r.u.log.Log(ctx, level, "the centre refused a device's notifications; they stay here", "device", f.Device, "why", f.Why)
		if f.Revoked {
			r.u.revoked(f.Device, "at the centre: "+f.Why)
		}
	}
}

// nextBatch reads what follows mark: up to a batch of items and of bytes, leaving out
// the devices the gateway keeps out (revoked here), whose ids the batch's Upto still
// covers so the centre's mark moves past them.
func (u *Uplink) nextBatch(ctx context.Context, source string, mark int64) (sshext.TelemetryBatch, error) {
	b := sshext.TelemetryBatch{Source: source, Upto: uint64(mark)}
	ns, err := u.cfg.Telemetry.After(ctx, mark, sshext.MaxTelemetryBatch)
	if err != nil {
		return b, err
	}
	size := 0
	for _, n := range ns {
		it := sshext.RelayedNotification{ID: uint64(n.ID), Device: n.Device, Name: n.Name, Parameters: string(n.Parameters),
			Stored: uint64(n.Timestamp.UnixMicro())}
		if n.DeviceTime != nil {
			it.DeviceTime = uint64(n.DeviceTime.UnixMicro())
		}
		// A record's own size plus its framing; the head is small.
		rec := 64 + len(it.Device) + len(it.Name) + len(it.Parameters)
		if len(b.Items) > 0 && size+rec > sshext.MaxTelemetryBytes {
			break
		}
		size += rec
		b.Upto = it.ID
		if u.cfg.RelayDevice != nil && !u.cfg.RelayDevice(n.Device) {
			continue
		}
		b.Items = append(b.Items, it)
	}
	return b, nil
}

// sendBatch sends one batch and reads the centre's answer.
func (u *Uplink) sendBatch(conn ssh.Conn, b sshext.TelemetryBatch) (sshext.TelemetryAck, error) {
	ok, body, err := conn.SendRequest(sshext.TelemetryRequest, true, sshext.MarshalTelemetry(b))
	if err != nil {
		return sshext.TelemetryAck{}, err
	}
	if !ok {
		return sshext.TelemetryAck{}, errRelayRefused
	}
	ack, err := sshext.ParseTelemetryAck(body)
	if err != nil {
		return ack, fmt.Errorf("the centre's answer to a batch: %w", err)
	}
	return ack, nil
}

// relayWait records err and waits before the next attempt; false means stop (the
// session or ctx ended, or the centre refuses relays on this session).
func (u *Uplink) relayWait(ctx context.Context, ended <-chan struct{}, err error, attempt int) bool {
	if isClosed(ended) || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, errRelayRefused) {
		u.setRelay(func(r *RelayStatus) { r.State, r.LastError = "refused", err.Error() })
		u.log.Warn("notifications are not relayed to the centre this session", "why", err)
		return false
	}
	delay := agent.Backoff(attempt, u.cfg.BackoffMin, u.cfg.BackoffMax)
	u.setRelay(func(r *RelayStatus) { r.State, r.LastError = "retrying", err.Error() })
	u.log.Warn("relaying notifications to the centre failed; retrying", "err", err, "in", delay.Round(time.Millisecond).String())
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ended:
	case <-ctx.Done():
	}
	return false
}

func (u *Uplink) setRelay(fn func(*RelayStatus)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn(&u.relayStatus)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
