package tlsbench

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
)

//go:embed helpers/tlsbench_openssl.c
var opensslHelper []byte

//go:embed helpers/tlsbench_wolfssl.c
var wolfsslHelper []byte

// commonHeader is what both helpers share (command line, sockets, time).
//
//go:embed helpers/tlsbench_common.h
var commonHeader []byte

// helpers are the C implementations: source, libraries, Debian's development package.
var helpers = map[string]struct {
	src  []byte
	libs []string
	pkg  string
}{
	"openssl": {opensslHelper, []string{"-lssl", "-lcrypto"}, "libssl-dev"},
	"wolfssl": {wolfsslHelper, []string{"-lwolfssl"}, "libwolfssl-dev"},
}

// buildHelper compiles impl's helper into dir.
func buildHelper(ctx context.Context, dir, impl string) (string, error) {
	h := helpers[impl]
	src, bin := filepath.Join(dir, "tlsbench_"+impl+".c"), filepath.Join(dir, "tlsbench_"+impl)
	if err := os.WriteFile(filepath.Join(dir, "tlsbench_common.h"), commonHeader, 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(src, h.src, 0o600); err != nil {
		return "", err
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler to build the %s helper: run scripts/setup.sh (gcc, %s)", impl, h.pkg)
	}
	out, err := exec.CommandContext(ctx, cc, append([]string{"-O2", "-o", bin, src}, h.libs...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the %s helper (needs %s: run scripts/setup.sh): %v\n%s", impl, h.pkg, err, out)
	}
	return bin, nil
}

// startHelper starts a helper's server (cmd "server", "dtls-server", or "echo" for fig.
// 6) at env's server end and returns its port.
func startHelper(ctx context.Context, env netEnv, bin, cmd, cert, key, pskHex string) (*lab.Proc, int, error) {
	p, err := lab.StartProc(filepath.Base(bin), nil, env.serverArgv(bin, cmd, env.listenArg(), cert, key, pskHex)...)
	if err != nil {
		return nil, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := p.ReadLine(rctx, "ready ")
	if err != nil {
		p.Stop()
		return nil, 0, err
	}
	port, err := strconv.Atoi(l)
	if err != nil {
		p.Stop()
		return nil, 0, fmt.Errorf("%s said %q", filepath.Base(bin), l)
	}
	return p, port, nil
}

// helperClient runs k connections of mode against port with a helper (with a suite and
// a time window for the suites x groups run: suite "" and window 0 are the defaults).
// A suite or group the library lacks is errUnsupported.
func helperClient(ctx context.Context, env netEnv, bin string, port, k int, mode, group, pskHex, caFile, suite string, window time.Duration) (Sample, error) {
	args := []string{"client", env.serverIP().String(), strconv.Itoa(port), strconv.Itoa(k), mode, group, pskHex, caFile}
	if suite != "" {
		args = append(args, suite, strconv.FormatFloat(window.Seconds(), 'f', 3, 64))
	}
	return runHelper(ctx, env, bin, args...)
}

// runHelper runs one of a helper's client commands at env's client end and reads its
// "ok" line; exit status 2 is errUnsupported.
func runHelper(ctx context.Context, env netEnv, bin string, args ...string) (Sample, error) {
	argv := env.clientArgv(append([]string{bin}, args...)...)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			return Sample{}, errUnsupported(strings.TrimSpace(string(out)))
		}
		return Sample{}, fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), args[0], err, strings.TrimSpace(string(out)))
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var n, resumed int
		var secs float64
		var sent, recvd int64
		if _, err := fmt.Sscanf(sc.Text(), "ok %d %f %d %d %d", &n, &secs, &resumed, &sent, &recvd); err == nil {
			return Sample{K: n, Seconds: secs, Resumed: resumed, Sent: sent, Received: recvd}, nil
		}
	}
	return Sample{}, fmt.Errorf("%s said %q", filepath.Base(bin), out)
}

// helperPayload runs fig. 6 with a helper against its echo server on port.
func helperPayload(ctx context.Context, bin string, port, size int, window time.Duration, caFile string) (Sample, error) {
	out, err := exec.CommandContext(ctx, bin, "payload", "127.0.0.1", strconv.Itoa(port), strconv.Itoa(size),
		strconv.FormatFloat(window.Seconds(), 'f', 3, 64), caFile).CombinedOutput()
	if err != nil {
		return Sample{}, fmt.Errorf("%s payload: %v: %s", filepath.Base(bin), err, strings.TrimSpace(string(out)))
	}
	var s Sample
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "ok %d %f %d %d %d", &s.K, &s.Seconds, &s.Resumed, &s.Sent, &s.Received); err != nil {
		return Sample{}, fmt.Errorf("%s said %q", filepath.Base(bin), out)
	}
	return s, nil
}

// errUnsupported is a suite or group an implementation cannot use: its cell says why.
type errUnsupported string

func (e errUnsupported) Error() string { return string(e) }
