package lab

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MosquittoOpts configures a Mosquitto broker (Debian's mosquitto 2.0) for the lab and
// the tests: the central broker of a bridge, or a site broker bridging into the hub.
type MosquittoOpts struct {
	// Host and Port to listen on: Host "" means 127.0.0.1; Port 0 picks a free one
	// (8883 in a namespace of the lab's, where every port is free).
	Host string
	Port int
	// Netns runs the broker in that namespace (one of the lab's).
	Netns string
	// CertFile and KeyFile make the listener TLS; CAFile, if set, asks clients for a
	// certificate signed by it.
	CertFile, KeyFile, CAFile string
	// TLSVersion is the lowest version the listener takes ("tlsv1.2", "tlsv1.3"; ""
	// is Mosquitto's default); Ciphers and Ciphers13 are OpenSSL cipher lists for TLS
	// 1.2 and 1.3 ("" is OpenSSL's default).
	TLSVersion, Ciphers, Ciphers13 string
	// Users are user name -> password (written with mosquitto_passwd); none means
	// anonymous clients are allowed.
	Users map[string]string
	// Extra is appended to mosquitto.conf (a bridge's `connection` section).
	Extra string
	// NoDelay turns Nagle's algorithm off on client sockets (set_tcp_nodelay true), as
	// Go, and so the hub, does by default. Mosquitto's default leaves it on: after a TLS
	// 1.3 handshake its session tickets and CONNACK then wait for the client's delayed
	// ACK (40-50 ms per connection).
	NoDelay bool
}

// Mosquitto is a running Mosquitto broker. Its persistence file lives in its folder, so
// a restarted broker keeps its sessions and queued messages.
type Mosquitto struct {
	Addr  string
	dir   string
	conf  string
	netns string
	proc  *Proc
}

// StartMosquitto writes a configuration into dir (created if needed) and starts the
// broker; it returns once Mosquitto says it is running.
func StartMosquitto(ctx context.Context, dir string, o MosquittoOpts) (*Mosquitto, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 && o.Netns != "" {
		o.Port = 8883
	}
	if o.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		o.Port = p
	}
	var c strings.Builder
	// Mosquitto run as root drops to the user "mosquitto" unless told otherwise: the
	// test's files are root's.
	fmt.Fprintf(&c, "user root\nper_listener_settings false\nlog_dest stdout\nlog_timestamp false\nlog_type error\nlog_type warning\nlog_type notice\nlog_type information\n")
	fmt.Fprintf(&c, "persistence true\npersistence_location %s/\nautosave_interval 1\n", dir)
	fmt.Fprintf(&c, "max_queued_messages 1000000\nmax_inflight_messages 100\n")
	if o.NoDelay {
		c.WriteString("set_tcp_nodelay true\n")
	}
	fmt.Fprintf(&c, "listener %d %s\n", o.Port, o.Host)
	if o.CertFile != "" {
		fmt.Fprintf(&c, "certfile %s\nkeyfile %s\n", o.CertFile, o.KeyFile)
		for _, kv := range [][2]string{{"tls_version", o.TLSVersion}, {"ciphers", o.Ciphers}, {"ciphers_tls1.3", o.Ciphers13}} {
			if kv[1] != "" {
				fmt.Fprintf(&c, "%s %s\n", kv[0], kv[1])
			}
		}
		if o.CAFile != "" {
			fmt.Fprintf(&c, "cafile %s\nrequire_certificate true\n", o.CAFile)
		}
	}
	if len(o.Users) > 0 {
		// One plain-text file hashed in place by one mosquitto_passwd -U: a fleet of
		// 10,000 users takes one process, not 10,000.
		pw := filepath.Join(dir, "passwd")
		var lines strings.Builder
		for _, u := range slices.Sorted(maps.Keys(o.Users)) {
			fmt.Fprintf(&lines, "%s:%s\n", u, o.Users[u])
		}
		if err := os.WriteFile(pw, []byte(lines.String()), 0o600); err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, "mosquitto_passwd", "-U", pw).CombinedOutput(); err != nil {
			os.Remove(pw)
			return nil, fmt.Errorf("lab: mosquitto_passwd -U: %v: %s", err, out)
		}
		fmt.Fprintf(&c, "allow_anonymous false\npassword_file %s\n", pw)
	} else {
		fmt.Fprintf(&c, "allow_anonymous true\n")
	}
	c.WriteString(o.Extra)
	m := &Mosquitto{Addr: net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), dir: dir, conf: filepath.Join(dir, "mosquitto.conf"), netns: o.Netns}
	if err := os.WriteFile(m.conf, []byte(c.String()), 0o600); err != nil {
		return nil, err
	}
	return m, m.Start(ctx)
}

// Start (again) the broker on its address, with its persistence file.
func (m *Mosquitto) Start(ctx context.Context) error {
	// Line-buffered: into a pipe, its log would wait for a full buffer.
	argv := []string{"stdbuf", "-oL", "mosquitto", "-c", m.conf}
	if m.netns != "" {
		argv = append([]string{"ip", "netns", "exec", m.netns}, argv...)
	}
	p, err := StartProc("mosquitto", nil, argv...)
	if err != nil {
		return err
	}
	// "mosquitto version 2.0.11 starting", then "... running" once it listens.
	for {
		l, err := p.ReadLine(ctx, "mosquitto version")
		if err != nil {
			p.Stop()
			return err
		}
		if strings.HasSuffix(l, "running") {
			break
		}
	}
	m.proc = p
	return nil
}

// Stop ends the broker cleanly (it saves its persistence file).
func (m *Mosquitto) Stop() {
	if m.proc != nil {
		m.proc.Stop()
		m.proc = nil
	}
}

// Kill ends the broker at once, as a crash.
func (m *Mosquitto) Kill() {
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
}

// PID of the running broker (0 when stopped): stdbuf and ip netns exec exec it, so the
// process started is the broker.
func (m *Mosquitto) PID() int {
	if m.proc == nil {
		return 0
	}
	return m.proc.PID()
}
