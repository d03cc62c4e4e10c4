package relaybench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// Options of a run.
type Options struct {
	Gateways      int // gateway hubs; 0 means 4 (1 with Quick)
	Devices       int // devices per gateway; 0 means 100 (2 with Quick)
	Notifications int // backlog per gateway; 0 means 50,000 (200 with Quick)
	Clients       int // REST clients posting to the centre directly; 0 means 8 (2 with Quick)
	Reps          int // 0 means 3 (1 with Quick)
	// Timeout bounds each phase; 0 means 10 minutes.
	Timeout  time.Duration
	Quick    bool
	Progress *lab.Progress
}

func (o *Options) defaults() {
	lab.Default(&o.Gateways, o.Quick, 4, 1)
	lab.Default(&o.Devices, o.Quick, 100, 2)
	lab.Default(&o.Notifications, o.Quick, 50000, 200)
	lab.Default(&o.Clients, o.Quick, 8, 2)
	lab.Default(&o.Reps, o.Quick, 3, 1)
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = &lab.Progress{}
	}
}

// Phase is one way of bringing the same number of notifications into the centre.
type Phase struct {
	Notifications int           // sent
	Arrived       int           // stored at the centre (relay: what the gateways' relays report)
	Duplicates    int           // relay: batches the centre recognised as sent before
	Elapsed       time.Duration // relay: from starting the gateways to the last mark; direct: first post to last answer
	CentreCPU     time.Duration
	SenderCPU     time.Duration // relay: the gateway hubs'; direct: not measured (this process)
}

// Rep is one repetition: fresh hubs, the relay, then the direct path.
type Rep struct {
	Rep           int
	Relay, Direct Phase
}

// Results of a run.
type Results struct {
	Options Options
	Reps    []Rep
}

// Measure runs o.Reps repetitions.
func Measure(ctx context.Context, b *lab.Bench, o Options) (Results, error) {
	o.defaults()
	res := Results{Options: o}
	o.Progress.Start(4 * o.Reps)
	for r := range o.Reps {
		o.Progress.Step(fmt.Sprintf("repetition %d of %d", r+1, o.Reps))
		rep, err := measureRep(ctx, b, o, r)
		if err != nil {
			return res, err
		}
		res.Reps = append(res.Reps, rep)
	}
	return res, nil
}

func measureRep(ctx context.Context, b *lab.Bench, o Options, r int) (Rep, error) {
	rep := Rep{Rep: r + 1}
	total := o.Gateways * o.Notifications
	keys, err := b.Scratch(fmt.Sprintf("gateway-keys-%d", r))
	if err != nil {
		return rep, err
	}
	secrets := map[string]string{}
	var secMu sync.Mutex
	restOn := func(c *hub.Config) {
		c.REST.Listen = "127.0.0.1:0"
		c.JWT.AccessTTL = time.Hour // the direct clients log in once
	}
	co := lab.IoTsafeOpts{Sessions: o.Clients, Forwards: 1, Prefix: "direct", Configure: restOn,
		Secrets: func(device, secret string) {
			secMu.Lock()
			secrets[device] = secret
			secMu.Unlock()
		},
		Enroll: func(ctx context.Context, adm lab.Admin) error {
			return lab.EnrollGateways(ctx, adm, keys, o.Gateways, o.Devices)
		}}
	clh, err := b.EnrollIoTsafe(ctx, fmt.Sprintf("centre-%d", r), co)
	if err != nil {
		return rep, fmt.Errorf("enrolling the centre: %w", err)
	}
	centre, err := b.StartEnrolled(ctx, clh, co)
	if err != nil {
		return rep, err
	}
	defer func() { centre.Proc.Stop() }()

	// The gateways' data folders, each with its backlog already in its store.
	o.Progress.Step(fmt.Sprintf("%d gateways, %d notifications stored at each", o.Gateways, o.Notifications))
	hubKey := ssh.FingerprintSHA256(centre.HostKey)
	type gateway struct {
		lh   *lab.LabHub
		opts lab.IoTsafeOpts
		hub  *lab.SSHServer
	}
	gws := make([]*gateway, o.Gateways)
	defer func() {
		for _, g := range gws {
			if g != nil && g.hub != nil {
				g.hub.Proc.Stop()
			}
		}
	}()
	for i := range gws {
		name := lab.GatewayName(i)
		g := &gateway{opts: lab.IoTsafeOpts{Sessions: o.Devices, Forwards: 1, Prefix: fmt.Sprintf("g%d-", i),
			Configure: func(c *hub.Config) {
				restOn(c)
				c.Upstream = hub.UpstreamConfig{Hub: centre.Addr, HubKey: hubKey, Name: name, Key: filepath.Join(keys, name)}
			}}}
		if g.lh, err = b.EnrollIoTsafe(ctx, fmt.Sprintf("%s-%d", name, r), g.opts); err != nil {
			return rep, fmt.Errorf("enrolling %s: %w", name, err)
		}
		if err := prefill(ctx, g.lh.Dir, g.opts.Prefix, o.Devices, o.Notifications); err != nil {
			return rep, fmt.Errorf("%s's backlog: %w", name, err)
		}
		gws[i] = g
	}

	// The relay: every gateway starts at once and drains its backlog into the centre.
	o.Progress.Step(fmt.Sprintf("relaying %d notifications through %d gateways", total, o.Gateways))
	c0, err := lab.TreeCPU(centre.Proc.PID())
	if err != nil {
		return rep, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(gws))
	for i, g := range gws {
		wg.Go(func() { g.hub, errs[i] = b.StartEnrolled(ctx, g.lh, g.opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	rep.Relay.Notifications = total
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	done := make([]bool, len(gws))
	for left := len(gws); left > 0; {
		for i, g := range gws {
			if done[i] {
				continue
			}
			st, err := g.hub.Status()
			if err != nil {
				return rep, err
			}
			if u := st.Upstream; u != nil && u.Relay != nil && u.Relay.Mark >= int64(o.Notifications) {
				done[i], left = true, left-1
				rep.Relay.Arrived += int(u.Relay.Relayed)
				rep.Relay.Duplicates += int(u.Relay.Duplicates)
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-pctx.Done():
			return rep, fmt.Errorf("the gateways did not relay their backlogs within %v: %w", o.Timeout, pctx.Err())
		case <-time.After(20 * time.Millisecond): // a measurement's poll, not a test's wait
		}
	}
	rep.Relay.Elapsed = time.Since(start)
	c1, _ := lab.TreeCPU(centre.Proc.PID())
	rep.Relay.CentreCPU = c1 - c0
	for _, g := range gws {
		c, _ := lab.TreeCPU(g.hub.Proc.PID())
		rep.Relay.SenderCPU += c
	}

	// The peer: as many notifications posted to the centre over REST by devices of its
	// own, each client one keep-alive connection sending as soon as it has its answer.
	o.Progress.Step(fmt.Sprintf("posting %d notifications to the centre over REST (%d clients)", total, o.Clients))
	rep.Direct, err = postDirect(pctx, centre, secrets, total, o.Clients)
	return rep, err
}

// prefill stores n notifications of devices prefix0..prefix(devices-1) in turn in the
// store of a gateway's data folder, before the gateway starts.
func prefill(ctx context.Context, dir, prefix string, devices, n int) error {
	s, err := telemetry.Open(ctx, dir, lab.UnlimitedStore(), telemetry.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	const chunk = 1000
	for k := 0; k < n; k += chunk {
		batch := make([]telemetry.Notification, 0, chunk)
		for i := k; i < min(n, k+chunk); i++ {
			batch = append(batch, telemetry.Notification{Device: lab.DeviceName(prefix, i%devices), Name: "uuid", Parameters: lab.UUIDPayload()})
		}
		if _, err := s.Append(ctx, batch...); err != nil {
			return err
		}
	}
	return nil
}

// postDirect sends total notifications to the centre's plain REST listener from
// clients devices, each logged in with its secret.
func postDirect(ctx context.Context, centre *lab.SSHServer, secrets map[string]string, total, clients int) (Phase, error) {
	ph := Phase{Notifications: total}
	base := "http://" + centre.REST + restapi.Prefix
	type client struct {
		device, auth string
		http         *http.Client
	}
	var cs []client
	for device, secret := range secrets {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: time.Minute}
		var tok struct {
			AccessToken string `json:"accessToken"`
		}
		if err := lab.CallJSON(ctx, c, "POST", base+"/token", "", map[string]string{"login": device, "password": secret}, &tok); err != nil {
			return ph, fmt.Errorf("%s's login at the centre: %w", device, err)
		}
		cs = append(cs, client{device: device, auth: "Bearer " + tok.AccessToken, http: c})
	}
	c0, err := lab.TreeCPU(centre.Proc.PID())
	if err != nil {
		return ph, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i, c := range cs {
		n := total / len(cs)
		if i < total%len(cs) {
			n++
		}
		wg.Go(func() {
			for range n {
				err := lab.CallJSON(ctx, c.http, "POST", base+"/device/"+c.device+"/notification", c.auth,
					map[string]any{"notification": "uuid", "parameters": lab.UUIDPayload()}, nil)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil {
					ph.Arrived++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	ph.Elapsed = time.Since(start)
	c1, _ := lab.TreeCPU(centre.Proc.PID())
	ph.CentreCPU = c1 - c0
	return ph, first
}
