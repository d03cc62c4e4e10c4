package hubbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// BulkPaths are the paths of the bulk part: one large answer through one forward, as a
// camera's recording or a firmware image travels.
var BulkPaths = []string{"plain", "iotsafe", "iotsafe_channels", "openssh", "dropbear"}

// BulkRow is one transfer.
type BulkRow struct {
	Path      string
	Rep       int
	Bytes     int64
	Elapsed   time.Duration
	ServerCPU time.Duration // the server's process tree over the transfer
	DeviceCPU time.Duration // the device side (fleet) of SSH paths
	Err       string
}

// MBps is the transfer's rate in megabytes (10^6) per second.
func (b BulkRow) MBps() float64 {
	if b.Elapsed <= 0 {
		return 0
	}
	return float64(b.Bytes) / 1e6 / b.Elapsed.Seconds()
}

// bulkPaths are the selected bulk paths.
func (o *Options) bulkPaths() []string {
	var ps []string
	for _, p := range BulkPaths {
		if len(o.Paths) == 0 || o.Paths[p] {
			ps = append(ps, p)
		}
	}
	return ps
}

// runBulk measures MB/s and CPU per MB of one transfer of o.BulkSize bytes from the
// device application to a platform client, per path, repetitions interleaved.
func runBulk(ctx context.Context, b *lab.Bench, o *Options, res *Results) error {
	r := &rpsRun{ctx: ctx, b: b, o: o, res: res,
		targets: map[string]lab.Target{}, servers: map[string]*lab.Proc{}, devices: map[string]*lab.Proc{}}
	defer r.stop()
	app, appAddr, err := r.appSized("app-bulk", nil, o.BulkSize)
	if err != nil {
		return err
	}
	r.targets["plain"] = lab.Target{Name: "plain", Addrs: []string{appAddr}}
	r.servers["plain"] = app
	opts := lab.IoTsafeOpts{Sessions: 1, Forwards: 1, UserSpace: true, MaxChannels: 8}
	r.ssh("iotsafe", appAddr, nil, r.iotsafe("iotsafe-bulk", opts, false))
	r.ssh("iotsafe_channels", appAddr, nil, r.iotsafe("iotsafe-bulk-channels", opts, true))
	r.ssh("openssh", appAddr, nil, func() (*lab.SSHServer, error) { return b.StartOpenSSH(ctx) })
	r.ssh("dropbear", appAddr, nil, func() (*lab.SSHServer, error) { return b.StartDropbear(ctx) })
	for rep := 1; rep <= o.Reps; rep++ {
		for _, p := range o.bulkPaths() {
			t, ok := r.targets[p]
			if !ok {
				o.Progress.Step(fmt.Sprintf("bulk %s skipped", p))
				continue
			}
			var server, device cpuWindow
			server.mark(r.servers[p], true)
			device.mark(r.devices[p], true)
			n, elapsed, err := transfer(ctx, t, o.BulkSize)
			server.mark(r.servers[p], false)
			device.mark(r.devices[p], false)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			row := BulkRow{Path: p, Rep: rep, Bytes: n, Elapsed: elapsed, ServerCPU: server.d, DeviceCPU: device.d}
			if err != nil {
				row.Err = err.Error()
			}
			res.Bulk = append(res.Bulk, row)
			o.Progress.Step(fmt.Sprintf("bulk %-16s rep %d: %7.1f MB/s %s", p, rep, row.MBps(), row.Err))
		}
	}
	return nil
}

// transfer fetches one answer of want bytes through t's first address.
func transfer(ctx context.Context, t lab.Target, want int) (int64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	dial := t.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	start := time.Now()
	c, err := dial(ctx, t.Addrs[0])
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: bulk\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 64<<10), nil)
	if err != nil {
		return 0, time.Since(start), err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	elapsed := time.Since(start)
	switch {
	case err != nil:
	case resp.StatusCode != http.StatusOK:
		err = fmt.Errorf("status %s", resp.Status)
	case n != int64(want):
		err = fmt.Errorf("%d bytes of %d", n, want)
	}
	return n, elapsed, err
}

// BulkSummary is the bulk part of summary.json, per path: medians over repetitions.
type BulkSummary struct {
	MBps map[string]float64 `json:"mb_per_s"`
	// ServerCPUPerMB and DeviceCPUPerMB are CPU milliseconds per megabyte moved.
	ServerCPUPerMB map[string]float64 `json:"server_cpu_ms_per_mb"`
	DeviceCPUPerMB map[string]float64 `json:"device_cpu_ms_per_mb,omitempty"`
	Errors         map[string]string  `json:"errors,omitempty"` // the first failed transfer's error
	Bytes          int                `json:"bytes"`
}

// summarizeBulk fills s.Bulk and the bulk ratios.
func (s *Summary) summarizeBulk(r *Results, o Options) {
	if len(r.Bulk) == 0 {
		return
	}
	b := &BulkSummary{MBps: map[string]float64{}, ServerCPUPerMB: map[string]float64{}, DeviceCPUPerMB: map[string]float64{}, Bytes: o.BulkSize}
	for _, p := range BulkPaths {
		var rate, server, device []float64
		for _, row := range r.Bulk {
			if row.Path != p {
				continue
			}
			if row.Err != "" {
				if b.Errors == nil {
					b.Errors = map[string]string{}
				}
				if b.Errors[p] == "" {
					b.Errors[p] = row.Err
				}
				continue
			}
			mb := float64(row.Bytes) / 1e6
			rate = append(rate, row.MBps())
			if row.ServerCPU > 0 {
				server = append(server, float64(row.ServerCPU.Microseconds())/1e3/mb)
			}
			if row.DeviceCPU > 0 {
				device = append(device, float64(row.DeviceCPU.Microseconds())/1e3/mb)
			}
		}
		if len(rate) > 0 {
			b.MBps[p] = lab.Median(rate)
		}
		if len(server) > 0 {
			b.ServerCPUPerMB[p] = lab.Median(server)
		}
		if len(device) > 0 {
			b.DeviceCPUPerMB[p] = lab.Median(device)
		}
	}
	s.Bulk = b
	ratio := func(name string, m map[string]float64, a, c string) {
		if m[a] > 0 && m[c] > 0 {
			s.Ratios[name] = m[a] / m[c]
		}
	}
	ratio("bulk_iotsafe_over_iotsafe_channels", b.MBps, "iotsafe", "iotsafe_channels")
	ratio("bulk_iotsafe_over_openssh", b.MBps, "iotsafe", "openssh")
	ratio("bulk_iotsafe_over_plain", b.MBps, "iotsafe", "plain")
	ratio("bulk_server_cpu_iotsafe_over_iotsafe_channels", b.ServerCPUPerMB, "iotsafe", "iotsafe_channels")
	ratio("bulk_server_cpu_iotsafe_over_openssh", b.ServerCPUPerMB, "iotsafe", "openssh")
}

// printBulk prints the bulk part as a table.
func printBulk(w io.Writer, b *BulkSummary) {
	if b == nil {
		return
	}
	fmt.Fprintf(w, "\nbulk transfer (one answer of %d bytes through one forward, medians):\n", b.Bytes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tMB/s\tserver CPU ms/MB\tdevice CPU ms/MB\t")
	for _, p := range BulkPaths {
		if v, ok := b.MBps[p]; ok {
			fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t\n", p, v, lab.FmtOpt(b.ServerCPUPerMB, p), lab.FmtOpt(b.DeviceCPUPerMB, p))
		}
	}
	tw.Flush()
	for _, p := range BulkPaths {
		if e, ok := b.Errors[p]; ok {
			fmt.Fprintf(w, "WARNING: bulk %s failed: %s\n", p, e)
		}
	}
}
