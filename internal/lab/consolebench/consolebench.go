package consolebench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// Options of a run.
type Options struct {
	Devices  int // 0 means 100,000 (200 with Quick)
	Requests int // per page; 0 means 30 (3 with Quick)
	Quick    bool
	Progress *lab.Progress
}

func (o *Options) defaults() error {
	if o.Devices < 0 || o.Requests < 0 {
		return errors.New("--devices and --requests must not be negative")
	}
	lab.Default(&o.Devices, o.Quick, 100000, 200)
	lab.Default(&o.Requests, o.Quick, 30, 3)
	if o.Progress == nil {
		o.Progress = &lab.Progress{W: io.Discard}
	}
	return nil
}

// Page is one page's timings.
type Page struct {
	Name, Path string
	Times      []time.Duration
	Bytes      int
}

// Results of a run.
type Results struct {
	Options Options
	Enrol   time.Duration // enrolling the devices (not a console figure)
	Pages   []Page
}

// TargetMS is the target for a page of the device list at 100,000 devices.
const TargetMS = 200

const (
	account  = "bench-admin"
	password = "bench-admin-password"
)

// Measure fills a hub's registry, logs in to its console and times its pages.
func Measure(ctx context.Context, b *lab.Bench, o Options) (Results, error) {
	res := Results{Options: o}
	if err := o.defaults(); err != nil {
		return res, err
	}
	res.Options = o
	o.Progress.Start(3)
	o.Progress.Step(fmt.Sprintf("enrolling %d devices (keys made here, one import)", o.Devices))
	// A pool of a million addresses (a lab hub's /16 holds 65,534 devices).
	opts := lab.IoTsafeOpts{Sessions: o.Devices, Prefix: "dev-", Frontdoor: true, Pool: sockets.Config{CIDR: "127.112.0.0/12"}, Enroll: func(ctx context.Context, adm lab.Admin) error {
		if _, err := adm.Run(ctx, strings.NewReader(password+"\n"), "account", "add", account, "--password-stdin"); err != nil {
			return err
		}
		_, err := adm.Run(ctx, nil, "grant", "--account", account, "@all", "+admin")
		return err
	}}
	start := time.Now()
	lh, err := b.EnrollIoTsafe(ctx, "console", opts)
	if err != nil {
		return res, err
	}
	res.Enrol = time.Since(start)
	o.Progress.Step("starting the hub")
	srv, err := b.StartEnrolled(ctx, lh, opts)
	if err != nil {
		return res, err
	}
	defer srv.Proc.Stop()
	c, err := login(ctx, srv.Front)
	if err != nil {
		return res, fmt.Errorf("logging in to the console: %w", err)
	}
	last := lab.DeviceName("dev-", o.Devices-1)
	pages := []Page{
		{Name: "fleet", Path: "/console/"},
		{Name: "devices, first page", Path: "/console/devices"},
		{Name: "devices, last page", Path: fmt.Sprintf("/console/devices?offset=%d", max(o.Devices-50, 0))},
		{Name: "devices, name search", Path: "/console/devices?q=" + url.QueryEscape(last[len(last)-3:])},
		{Name: "devices, offline by last seen", Path: "/console/devices?state=offline&sort=last_seen"},
		{Name: "a device", Path: "/console/devices/" + last},
		{Name: "audit log", Path: "/console/audit"},
		{Name: "crypto posture", Path: "/console/crypto"},
	}
	o.Progress.Step(fmt.Sprintf("%d pages, %d requests each", len(pages), o.Requests))
	for i := range pages {
		p := &pages[i]
		for range o.Requests {
			d, n, err := fetch(ctx, c, p.Path)
			if err != nil {
				res.Pages = append(res.Pages, pages[:i]...)
				return res, fmt.Errorf("%s: %w", p.Name, err)
			}
			p.Times, p.Bytes = append(p.Times, d), n
		}
	}
	res.Pages = pages
	o.Progress.Done()
	return res, nil
}

// client is a browser's: the hub's CA, cookies, the front door's address for its
// domain.
func client(front *lab.FrontdoorInfo) *http.Client {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: front.CA},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, front.Addr)
		}}
	return &http.Client{Transport: tr, Jar: jar, Timeout: 60 * time.Second}
}

func login(ctx context.Context, front *lab.FrontdoorInfo) (*http.Client, error) {
	c := client(front)
	form := url.Values{"user": {account}, "password": {password}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+lab.FrontdoorDomain+"/console/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/console/" {
		return nil, fmt.Errorf("%s at %s", resp.Status, resp.Request.URL.Path)
	}
	return c, nil
}

// fetch times one page to its last byte.
func fetch(ctx context.Context, c *http.Client, path string) (time.Duration, int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+lab.FrontdoorDomain+path, nil)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return d, int(n), err
}

// quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(float64(len(sorted))*q), len(sorted)-1)]
}

func sortedTimes(p Page) []time.Duration {
	s := slices.Clone(p.Times)
	slices.Sort(s)
	return s
}
