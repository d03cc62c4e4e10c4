package registrybench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Options configures the registry part.
type Options struct {
	Quick bool
	// DSN is an empty PostgreSQL database to measure; "" starts a scratch server.
	DSN string
	// Devices are the sessions of each setup pass; 0 means 1000 (50 with Quick).
	Devices int
	// Ops are the operations of each admin kind; 0 means 500 (40 with Quick).
	Ops int
	// Writers are the concurrent admin writers of the parallel figure; 0 means 8.
	Writers int
	// Reps are the session setup passes per registry; 0 means 3 (1 with Quick).
	Reps int
	// Notifications are stored per notification figure; 0 means 20000 (400 with Quick).
	Notifications int
	Progress      *lab.Progress
}

func (o *Options) defaults() {
	lab.Default(&o.Devices, o.Quick, 1000, 50)
	lab.Default(&o.Ops, o.Quick, 500, 40)
	lab.Default(&o.Writers, o.Quick, 8, 4)
	lab.Default(&o.Reps, o.Quick, 3, 1)
	lab.Default(&o.Notifications, o.Quick, 20000, 400)
}

// notifyWriters are the devices storing notifications at once, each waiting for its
// own to be durable before the next (as the REST API answers only then).
const notifyWriters = 64

// benchPool is the pool of every registry of the part.
var benchPool = sockets.Config{CIDR: "127.90.0.0/16"}

// Backends are the registries compared, SQLite first.
var Backends = []string{"sqlite", "postgres"}

// Row is one timed batch.
type Row struct {
	Backend string  `json:"backend"`
	Part    string  `json:"part"` // "admin", "sessions" or "telemetry"
	Op      string  `json:"op"`   // device_add, grant, revoke, device_show; setup; append, append_two_hubs
	Writers int     `json:"writers"`
	Rep     int     `json:"rep"`
	N       int     `json:"n"`
	Seconds float64 `json:"seconds"`
}

// PerSecond is the batch's rate.
func (r Row) PerSecond() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.N) / r.Seconds
}

// Results are the rows of a run.
type Results struct {
	Options  Options
	Postgres string // where PostgreSQL was: the DSN without password, or "scratch server"
	Rows     []Row
}

// Measure runs both registries' parts; a run cut short returns what it measured.
func Measure(ctx context.Context, b *lab.Bench, o Options) (*Results, error) {
	o.defaults()
	res := &Results{Options: o, Postgres: "scratch PostgreSQL server started by the lab"}
	dsn := o.DSN
	if dsn == "" {
		srv, err := pgscratch.NewWith(pgscratch.Options{Durable: true})
		if err != nil {
			return res, err
		}
		defer srv.Close()
		if dsn, err = srv.CreateDatabase(); err != nil {
			return res, err
		}
	} else {
		res.Postgres = sqldb.Redact(dsn)
		if err := lab.MustBeEmptyDatabase(ctx, dsn); err != nil {
			return res, err
		}
	}
	p := o.Progress
	p.Start(len(Backends) * (2 + o.Reps))
	for _, backend := range Backends {
		dir, err := b.Scratch("registry-" + backend)
		if err != nil {
			return res, err
		}
		where := filepath.Join(dir, "admin")
		if backend == "postgres" {
			where = dsn
		}
		// Sessions first: the lab enrols its devices into an empty registry.
		rows, err := sessionSetup(ctx, b, backend, dsn, o)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return res, fmt.Errorf("%s session setup: %w", backend, err)
		}
		rows, err = adminOps(ctx, where, backend, o)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return res, fmt.Errorf("%s admin operations: %w", backend, err)
		}
		p.Step(fmt.Sprintf("%s: admin operations", backend))
		telemetryAt := filepath.Join(dir, "telemetry")
		if backend == "postgres" {
			telemetryAt = dsn
		}
		rows, err = notifications(ctx, telemetryAt, backend, o)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return res, fmt.Errorf("%s notifications: %w", backend, err)
		}
		p.Step(fmt.Sprintf("%s: notifications", backend))
	}
	p.Done()
	return res, nil
}

// adminOps times each admin operation through the registry's API, on one handle, then
// device_add from Writers handles at once (as parallel admin commands).
func adminOps(ctx context.Context, where, backend string, o Options) ([]Row, error) {
	if !sqldb.IsDSN(where) {
		if err := mkdir(where); err != nil {
			return nil, err
		}
	}
	reg, err := registry.Open(ctx, where, benchPool)
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	if err := reg.PutProfile(ctx, &profile.Profile{Name: "bench", Reverse: map[string]int{"http": 80}}); err != nil {
		return nil, err
	}
	// Keys are made before the clock starts: the cost measured is the registry's.
	keys := make([]ssh.PublicKey, o.Ops*(1+o.Writers))
	for i := range keys {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		if keys[i], err = ssh.NewPublicKey(pub); err != nil {
			return nil, err
		}
	}
	var rows []Row
	timed := func(op string, writers int, n int, fn func(i int) error) error {
		start := time.Now()
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(i); err != nil {
				return fmt.Errorf("%s %d: %w", op, i, err)
			}
		}
		rows = append(rows, Row{Backend: backend, Part: "admin", Op: op, Writers: writers, N: n, Seconds: time.Since(start).Seconds()})
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("adm%d", i) }
	if err := timed("device_add", 1, o.Ops, func(i int) error {
		_, err := reg.AddDevice(ctx, name(i), "bench", keys[i], "bench")
		return err
	}); err != nil {
		return rows, err
	}
	if err := timed("device_show", 1, o.Ops, func(i int) error {
		_, err := reg.Device(ctx, name(i))
		return err
	}); err != nil {
		return rows, err
	}
	if err := timed("grant", 1, o.Ops, func(i int) error {
		return reg.AddGrant(ctx, registry.Grant{Kind: registry.PrincipalUser, Name: "app", XID: 1000, Target: name(i), Alias: "http"})
	}); err != nil {
		return rows, err
	}
	if err := timed("revoke", 1, o.Ops, func(i int) error {
		return reg.RevokeDevice(ctx, name(i), "bench")
	}); err != nil {
		return rows, err
	}
	// Writers at once, each with its own handle (connection pool), as admin commands run
	// by several operators or scripts.
	handles := make([]*registry.Registry, o.Writers)
	for w := range handles {
		if handles[w], err = registry.Open(ctx, where, sockets.Config{}); err != nil {
			return rows, err
		}
		defer handles[w].Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, o.Writers)
	start := time.Now()
	for w, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range o.Ops {
				k := o.Ops + w*o.Ops + i
				if _, err := h.AddDevice(ctx, name(k), "bench", keys[k], "bench"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return rows, fmt.Errorf("device_add with %d writers: %w", o.Writers, err)
	}
	rows = append(rows, Row{Backend: backend, Part: "admin", Op: "device_add", Writers: o.Writers, N: o.Writers * o.Ops, Seconds: time.Since(start).Seconds()})
	return rows, nil
}

// sessionSetup starts a hub on the registry and times Reps passes of the whole fleet
// connecting (each device's session with its reverse forward), the fleet closing
// between passes.
func sessionSetup(ctx context.Context, b *lab.Bench, backend, dsn string, o Options) ([]Row, error) {
	// The pool the admin part recorded: on an operator's database both parts share one
	// registry.
	opts := lab.IoTsafeOpts{Sessions: o.Devices, Forwards: 1, UserSpace: true, Prefix: "ses", Pool: benchPool}
	if backend == "postgres" {
		opts.Registry = dsn
	}
	srv, err := b.StartIoTsafe(ctx, "registry-hub-"+backend, opts)
	if err != nil {
		return nil, err
	}
	defer srv.Proc.Stop()
	var rows []Row
	for rep := 1; rep <= o.Reps; rep++ {
		// Target: no traffic flows, sessions only.
		fc := lab.FleetConfig{Server: srv.Addr, HostKey: srv.HostKey, Target: "127.0.0.1:9", Sessions: o.Devices, Forwards: 1,
			IoTsafe: true, Prefix: "ses", KeyDir: srv.KeyDir, Multiplex: true}
		secs, err := timeFleet(ctx, fc)
		if err != nil {
			return rows, fmt.Errorf("pass %d: %w", rep, err)
		}
		rows = append(rows, Row{Backend: backend, Part: "sessions", Op: "setup", Writers: 1, Rep: rep, N: o.Devices, Seconds: secs})
		o.Progress.Step(fmt.Sprintf("%s: %d sessions in %.2f s (pass %d)", backend, o.Devices, secs, rep))
		if err := waitSessionsEnded(ctx, srv, rep*o.Devices); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// timeFleet connects the fleet in this process and returns how long until every
// session was up, then closes it.
func timeFleet(ctx context.Context, fc lab.FleetConfig) (float64, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		err := lab.RunFleet(fctx, fc, w)
		w.CloseWithError(err)
		done <- err
	}()
	buf := make([]byte, 64<<10)
	var seen strings.Builder
	for {
		n, err := r.Read(buf)
		seen.Write(buf[:n])
		if strings.Contains(seen.String(), "ready\n") {
			break
		}
		if err != nil {
			<-done
			return 0, fmt.Errorf("the fleet stopped before it was up: %w", err)
		}
		if seen.Len() > 1<<20 {
			seen.Reset()
		}
	}
	secs := time.Since(start).Seconds()
	cancel()
	go io.Copy(io.Discard, r)
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return secs, err
	}
	return secs, nil
}

// waitSessionsEnded waits until the hub has seen every session of the last pass end and
// has recorded the ends (closes of them in all), so the next pass times its own sessions
// alone.
func waitSessionsEnded(ctx context.Context, srv *lab.SSHServer, closes int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := srv.Status()
		if err != nil {
			return err
		}
		recorded := 0
		if info.Online == 0 {
			if recorded, err = srv.EventCount(ctx, registry.EventSessionClose, closes); err != nil {
				return err
			}
			if recorded == closes {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a minute after the fleet closed: %d sessions still open, %d of %d session ends recorded", info.Online, recorded, closes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o700) }

// notifications times the telemetry store at where: notifyWriters devices storing
// Notifications in all. On PostgreSQL also two hubs' stores writing the shared table at
// once, half the devices each (their batches take turns under the store's lock).
func notifications(ctx context.Context, where, backend string, o Options) ([]Row, error) {
	if !sqldb.IsDSN(where) {
		if err := mkdir(where); err != nil {
			return nil, err
		}
	}
	var rows []Row
	hubs := []int{1}
	if backend == "postgres" {
		hubs = append(hubs, 2)
	}
	for _, n := range hubs {
		secs, err := appendRate(ctx, where, n, o.Notifications)
		if err != nil {
			return rows, err
		}
		op := "append"
		if n == 2 {
			op = "append_two_hubs"
		}
		rows = append(rows, Row{Backend: backend, Part: "telemetry", Op: op, Writers: notifyWriters, N: o.Notifications, Seconds: secs})
	}
	return rows, nil
}

// appendRate opens hubs stores at where and times total notifications stored by
// notifyWriters devices spread over them.
func appendRate(ctx context.Context, where string, hubs, total int) (float64, error) {
	stores := make([]*telemetry.Store, hubs)
	for i := range stores {
		st, err := telemetry.Open(ctx, where, lab.UnlimitedStore(), telemetry.Options{})
		if err != nil {
			return 0, err
		}
		defer st.Close()
		stores[i] = st
	}
	payload := json.RawMessage(`{"temperature":21.5,"humidity":40}`)
	errs := make(chan error, notifyWriters)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range notifyWriters {
		st := stores[w%hubs]
		n := total / notifyWriters
		if w < total%notifyWriters {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := fmt.Sprintf("dev%d", w)
			for range n {
				if _, err := st.Append(ctx, telemetry.Notification{Device: dev, Name: "reading", Parameters: payload}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	close(errs)
	return secs, <-errs
}
