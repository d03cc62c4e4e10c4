package linkbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// Result is a bulk TCP transfer over an emulated link, beside the model's ceiling.
type Result struct {
	Link       string  `json:"link"`
	Bytes      int     `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	Goodput    float64 `json:"goodput_bps"`
	Ceiling    float64 `json:"model_ceiling_bps"`
	Frames     int64   `json:"frames"`
	LinkBytes  int64   `json:"link_bytes"`
	Efficiency float64 `json:"channel_efficiency"` // payload bytes over bytes on the link, both directions
	Lost       int64   `json:"lost_packets"`
	Dropped    int64   `json:"dropped_packets"`
}

// Measure joins two fresh network namespaces (device and gateway side) by the emulated
// link and sends n bytes over one TCP connection from the device side. The namespaces
// and devices are removed afterwards.
func Measure(ctx context.Context, prof linkemu.Profile, n int) (Result, error) {
	res := Result{Link: prof.Name, Bytes: n, Ceiling: prof.MaxGoodput(prof.MTU - 60)}
	dev, gw := lab.NetnsName("link-dev"), lab.NetnsName("link-gw")
	for _, ns := range []string{dev, gw} {
		if err := lab.AddNetns(ns); err != nil {
			return res, err
		}
		defer lab.DelNetns(ns)
	}
	devAddr, gwAddr := netip.MustParsePrefix("fd77::1/64"), netip.MustParsePrefix("fd77::2/64")
	br, err := linkemu.Open(prof, linkemu.End{Netns: dev, Device: "lowpan0", Addr: devAddr}, linkemu.End{Netns: gw, Device: "lowpan0", Addr: gwAddr}, uint64(time.Now().UnixNano()), nil)
	if err != nil {
		return res, err
	}
	defer br.Close()
	var ln net.Listener
	if err := linkemu.InNetns(gw, func() (err error) {
		ln, err = net.Listen("tcp", "[fd77::2]:0")
		return err
	}); err != nil {
		return res, err
	}
	defer ln.Close()
	type recv struct {
		got int64
		d   time.Duration
		err error
	}
	done := make(chan recv, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- recv{err: err}
			return
		}
		defer c.Close()
		start := time.Now()
		got, err := io.Copy(io.Discard, c)
		done <- recv{got, time.Since(start), err}
	}()
	var c net.Conn
	if err := linkemu.InNetns(dev, func() (err error) {
		d := net.Dialer{Timeout: 30 * time.Second}
		c, err = d.DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return res, err
	}
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	if _, err := c.Write(lab.Body(n)); err != nil {
		c.Close()
		return res, err
	}
	c.Close()
	r := <-done
	if r.err != nil || r.got != int64(n) {
		return res, fmt.Errorf("lab: received %d of %d bytes: %v", r.got, n, r.err)
	}
	res.Seconds = r.d.Seconds()
	res.Goodput = float64(n*8) / r.d.Seconds()
	for i := range br.Stats {
		st := &br.Stats[i]
		res.Frames += st.Frames.Load()
		res.LinkBytes += st.LinkBytes.Load()
		res.Lost += st.Lost.Load()
		res.Dropped += st.Dropped.Load()
	}
	if res.LinkBytes > 0 {
		res.Efficiency = float64(n) / float64(res.LinkBytes)
	}
	return res, nil
}

// Print writes r for people.
func Print(w io.Writer, r Result) {
	fmt.Fprintf(w, "link %s: %d bytes in %.2f s\n", r.Link, r.Bytes, r.Seconds)
	fmt.Fprintf(w, "  goodput        %10.0f bit/s\n", r.Goodput)
	fmt.Fprintf(w, "  model ceiling  %10.0f bit/s (measured/model %.2f)\n", r.Ceiling, r.Goodput/r.Ceiling)
	fmt.Fprintf(w, "  frames %d, link bytes %d, channel efficiency %.2f, lost %d, dropped %d\n", r.Frames, r.LinkBytes, r.Efficiency, r.Lost, r.Dropped)
}
