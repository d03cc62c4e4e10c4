package wsbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sync/errgroup"

	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/restapi"
	"github.com/iotsafe/iotsafe/internal/wsapi"
)

// Options of a run.
type Options struct {
	Notifications int // per path; 0 means 20,000 (200 with Quick)
	Window        int // requests in flight on the pipelined socket; 0 means 32
	Subscribers   int // sockets each holding a subscription; 0 means 2,000 (20 with Quick)
	Reps          int // 0 means 3 (1 with Quick)
	Quick         bool
	Progress      *lab.Progress
}

func (o *Options) defaults() error {
	if o.Notifications < 0 || o.Window < 0 || o.Subscribers < 0 || o.Reps < 0 {
		return fmt.Errorf("--notifications, --window, --subscribers and --reps must not be negative")
	}
	lab.Default(&o.Notifications, o.Quick, 20000, 200)
	lab.Default(&o.Window, false, 32, 32)
	lab.Default(&o.Subscribers, o.Quick, 2000, 20)
	lab.Default(&o.Reps, o.Quick, 3, 1)
	if o.Subscribers > 9000 {
		return fmt.Errorf("--subscribers: %d is more than the hub's REST poll places hold (rest.max_polls 10000)", o.Subscribers)
	}
	if o.Progress == nil {
		o.Progress = &lab.Progress{W: io.Discard}
	}
	return nil
}

// The ways one device stores its notifications.
const (
	PathREST      = "rest"                // POST /device/{id}/notification, one keep-alive connection
	PathWS        = "websocket"           // notification/insert, each sent once the last was answered
	PathWSWindow  = "websocket-pipelined" // notification/insert, Window in flight
	HoldWS        = "websocket"           // a socket with a command subscription
	HoldLongPoll  = "rest-long-poll"      // GET /device/{id}/command/poll?waitTimeout=60
	settle        = 2 * time.Second       // lets the hub's memory settle before a reading
	subscribeConc = 100                   // sockets opened at once
)

// Path is one way's run.
type Path struct {
	Name          string
	Notifications int           // answered with success
	Elapsed       time.Duration // first send to last answer
	HubCPU        time.Duration
}

// Holding is what the hub holds for Held waiting clients of one kind.
type Holding struct {
	Kind      string
	Held      int
	Base, Now lab.Memory
}

// Rep is one repetition on a fresh hub.
type Rep struct {
	Rep      int
	Paths    []Path
	Holdings []Holding
}

// Results of a run.
type Results struct {
	Options Options
	Reps    []Rep
}

// Measure runs o.Reps repetitions.
func Measure(ctx context.Context, b *lab.Bench, o Options) (Results, error) {
	res := Results{Options: o}
	if err := o.defaults(); err != nil {
		return res, err
	}
	res.Options = o
	lab.RaiseFileLimit(o.Progress)
	o.Progress.Start(7 * o.Reps)
	for r := range o.Reps {
		rep, err := measureRep(ctx, b, o, r)
		if err != nil {
			return res, err
		}
		res.Reps = append(res.Reps, rep)
	}
	o.Progress.Done()
	return res, nil
}

func measureRep(ctx context.Context, b *lab.Bench, o Options, r int) (Rep, error) {
	rep := Rep{Rep: r + 1}
	secrets := map[string]string{}
	var mu sync.Mutex
	opts := lab.IoTsafeOpts{Sessions: o.Subscribers, Prefix: "ws",
		Secrets: func(d, s string) { mu.Lock(); secrets[d] = s; mu.Unlock() },
		Configure: func(c *hub.Config) {
			c.REST.Listen = "127.0.0.1:0"
			c.JWT.AccessTTL = time.Hour // each client logs in once
			// The whole fleet comes from one address here: the per-source cap on sockets
			// not authenticated yet must admit the bench's concurrency.
			c.WebSocket.MaxUnauthenticatedPerAddress = subscribeConc + 16
			c.WebSocket.MaxSockets = o.Subscribers + 100
			c.Metrics.Listen = "127.0.0.1:0" // the REST polls held, for the long-poll reading
		}}
	o.Progress.Step(fmt.Sprintf("repetition %d of %d: enrolling %d devices with secrets", r+1, o.Reps, o.Subscribers))
	lh, err := b.EnrollIoTsafe(ctx, fmt.Sprintf("websocket-%d", r), opts)
	if err != nil {
		return rep, err
	}
	srv, err := b.StartEnrolled(ctx, lh, opts)
	if err != nil {
		return rep, err
	}
	defer func() { srv.Proc.Stop() }()
	base := "http://" + srv.REST + restapi.Prefix
	wsURL := "ws://" + srv.REST + wsapi.Path
	first := lab.DeviceName("ws", 0)
	tok, err := login(ctx, 0, base, first, secrets[first])
	if err != nil {
		return rep, err
	}
	for _, path := range []string{PathREST, PathWS, PathWSWindow} {
		o.Progress.Step(fmt.Sprintf("%s: %d notifications from one device", path, o.Notifications))
		p, err := storeOver(ctx, srv.Proc.PID(), path, base, wsURL, first, tok, o)
		rep.Paths = append(rep.Paths, p)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", path, err)
		}
	}
	o.Progress.Step(fmt.Sprintf("logging %d devices in", o.Subscribers))
	toks, err := loginAll(ctx, base, secrets)
	if err != nil {
		return rep, err
	}
	for _, kind := range []string{HoldWS, HoldLongPoll} {
		// A hub started afresh for each: what the last phase grew of its heap would
		// otherwise be counted as the next one's, or hide it.
		srv.Proc.Stop()
		if srv, err = b.StartEnrolled(ctx, lh, opts); err != nil {
			return rep, err
		}
		base, wsURL = "http://"+srv.REST+restapi.Prefix, "ws://"+srv.REST+wsapi.Path
		o.Progress.Step(fmt.Sprintf("%d devices each holding a %s", o.Subscribers, kind))
		h, err := hold(ctx, srv.Proc.PID(), kind, base, wsURL, srv.MetricsURL, toks)
		rep.Holdings = append(rep.Holdings, h)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", kind, err)
		}
	}
	return rep, nil
}

// perSource is how many of the bench's connections share a source address: the plain
// listener holds at most 64 TCP connections per local address (deviceplain), so the
// fleet spreads over loopback addresses as devices on a LAN would come from theirs.
const perSource = 40

// source is the loopback address connection i comes from: 127.1.0.1, then one address
// per perSource connections.
func source(i int) net.IP {
	n := i / perSource
	return net.IPv4(127, 1, byte(n/250), byte(n%250+1))
}

// dialerFrom dials from source(i).
func dialerFrom(i int) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: source(i)}, Timeout: 30 * time.Second}
}

// storeOver sends o.Notifications of device over path and times them.
func storeOver(ctx context.Context, pid int, path, base, wsURL, device, tok string, o Options) (Path, error) {
	p := Path{Name: path}
	c0, err := lab.TreeCPU(pid)
	if err != nil {
		return p, err
	}
	start := time.Now()
	switch path {
	case PathREST:
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DialContext: dialerFrom(0).DialContext}, Timeout: time.Minute}
		for range o.Notifications {
			if err := lab.CallJSON(ctx, c, "POST", base+"/device/"+device+"/notification", tok, map[string]any{"notification": "uuid", "parameters": lab.UUIDPayload()}, nil); err != nil {
				return p, err
			}
			p.Notifications++
		}
	default:
		window := 1
		if path == PathWSWindow {
			window = o.Window
		}
		p.Notifications, err = insertOverSocket(ctx, wsURL, device, tok, o.Notifications, window)
	}
	p.Elapsed = time.Since(start)
	c1, _ := lab.TreeCPU(pid)
	p.HubCPU = c1 - c0
	return p, err
}

// insertOverSocket sends n notification/insert on one socket, window in flight, and
// counts the successes.
func insertOverSocket(ctx context.Context, url, device, tok string, n, window int) (int, error) {
	conn, err := dialAuthenticated(ctx, 0, url, tok)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	slots := make(chan struct{}, window)
	var ok atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			var a struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			if err := conn.ReadJSON(&a); err != nil {
				readErr <- err
				return
			}
			if a.Status != "success" {
				readErr <- fmt.Errorf("notification/insert: %s", a.Error)
				return
			}
			ok.Add(1)
			<-slots
		}
		readErr <- nil
	}()
	for i := 0; i < n; i++ {
		select {
		case slots <- struct{}{}:
		case err := <-readErr:
			return int(ok.Load()), err
		case <-ctx.Done():
			return int(ok.Load()), ctx.Err()
		}
		m := map[string]any{"action": "notification/insert", "requestId": i, "deviceId": device,
			"notification": map[string]any{"notification": "uuid", "parameters": lab.UUIDPayload()}}
		if err := conn.WriteJSON(m); err != nil {
			return int(ok.Load()), err
		}
	}
	err = <-readErr
	return int(ok.Load()), err
}

// dialAuthenticated opens a socket from source(i) and authenticates it with tok (a
// "Bearer ..." header value).
func dialAuthenticated(ctx context.Context, i int, url, tok string) (*websocket.Conn, error) {
	d := websocket.Dialer{NetDialContext: dialerFrom(i).DialContext, HandshakeTimeout: 30 * time.Second}
	conn, resp, err := d.DialContext(ctx, url, nil)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			return nil, fmt.Errorf("%w: %s %s", err, resp.Status, bytes.TrimSpace(b))
		}
		return nil, err
	}
	if err := request(conn, map[string]any{"action": "authenticate", "requestId": "auth", "token": tok[len("Bearer "):]}); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// request sends m and reads its answer, which must be a success.
func request(conn *websocket.Conn, m map[string]any) error {
	if err := conn.WriteJSON(m); err != nil {
		return err
	}
	var a struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := conn.ReadJSON(&a); err != nil {
		return err
	}
	if a.Status != "success" {
		return fmt.Errorf("%s: %s", m["action"], a.Error)
	}
	return nil
}

// hold has every device of toks hold a waiting client of kind, reads the hub's memory
// before and with them held, and lets them go.
func hold(ctx context.Context, pid int, kind, base, wsURL, metrics string, toks map[string]string) (Holding, error) {
	h := Holding{Kind: kind}
	lab.Sleep(ctx, settle)
	h.Base, _ = lab.TreeMemory(pid)
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(subscribeConc)
	var mu sync.Mutex
	var conns []*websocket.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var held atomic.Int64
	polls := &sync.WaitGroup{}
	i := 0
	for device, tok := range toks {
		i++
		i := i // this connection's own index
		g.Go(func() error {
			if kind == HoldWS {
				conn, err := dialAuthenticated(hctx, i, wsURL, tok)
				if err != nil {
					return err
				}
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
				if err := request(conn, map[string]any{"action": "command/subscribe", "requestId": "s"}); err != nil {
					return err
				}
				held.Add(1)
				return nil
			}
			polls.Add(1)
			go func() {
				defer polls.Done()
				c := &http.Client{Transport: &http.Transport{DialContext: dialerFrom(i).DialContext}}
				req, _ := http.NewRequestWithContext(hctx, "GET", base+"/device/"+device+"/command/poll?waitTimeout=60", nil)
				req.Header.Set("Authorization", tok)
				held.Add(1)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			return nil
		})
	}
	err := g.Wait()
	if kind == HoldLongPoll {
		// A poll counts once the hub holds it: its metric of polls open.
		err = waitHeld(ctx, metrics, len(toks))
	}
	h.Held = int(held.Load())
	lab.Sleep(ctx, settle)
	h.Now, _ = lab.TreeMemory(pid)
	cancel()
	polls.Wait()
	return h, err
}

// waitHeld waits until the hub's gauge of long polls open (iotsafe_rest_polls) reads
// n, at most a minute.
func waitHeld(ctx context.Context, metrics string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := gauge(ctx, metrics, "iotsafe_rest_polls")
		if err != nil {
			return err
		}
		if int(v) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hub holds %d long polls of %d sent, a minute on", int(v), n)
		}
		lab.Sleep(ctx, 50*time.Millisecond) // a measurement's poll of the hub's gauge
	}
}

// gauge reads one unlabelled sample from the hub's metrics.
func gauge(ctx context.Context, url, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("hub metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("hub metrics: no %s", name)
}

// login is a device's access token as an Authorization value, asked from source(i).
func login(ctx context.Context, i int, base, device, secret string) (string, error) {
	var tok struct {
		AccessToken string `json:"accessToken"`
	}
	tr := &http.Transport{DialContext: dialerFrom(i).DialContext}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: time.Minute, Transport: tr}
	if err := lab.CallJSON(ctx, c, "POST", base+"/token", "", map[string]string{"login": device, "password": secret}, &tok); err != nil {
		return "", fmt.Errorf("%s's login: %w", device, err)
	}
	return "Bearer " + tok.AccessToken, nil
}

// loginAll logs every device in, 50 at once.
func loginAll(ctx context.Context, base string, secrets map[string]string) (map[string]string, error) {
	var g errgroup.Group
	g.SetLimit(perSource / 2)
	var mu sync.Mutex
	out := make(map[string]string, len(secrets))
	i := 0
	for d, s := range secrets {
		i++
		i := i // this login's own index
		g.Go(func() error {
			tok, err := login(ctx, i, base, d, s)
			mu.Lock()
			out[d] = tok
			mu.Unlock()
			return err
		})
	}
	return out, g.Wait()
}
