package tlsbench

import (
	"bufio"
	"context"
	_ "embed"
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

// buildHelper compiles the OpenSSL helper into dir.
func buildHelper(ctx context.Context, dir string) (string, error) {
	src, bin := filepath.Join(dir, "tlsbench_openssl.c"), filepath.Join(dir, "tlsbench_openssl")
	if err := os.WriteFile(src, opensslHelper, 0o600); err != nil {
		return "", err
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler to build the OpenSSL helper: run scripts/setup.sh (gcc, libssl-dev)")
	}
	out, err := exec.CommandContext(ctx, cc, "-O2", "-o", bin, src, "-lssl", "-lcrypto").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the OpenSSL helper (needs libssl-dev: run scripts/setup.sh): %v\n%s", err, out)
	}
	return bin, nil
}

// opensslServer starts the helper's server and returns its port.
func opensslServer(ctx context.Context, bin, cert, key, pskHex string) (*lab.Proc, int, error) {
	p, err := lab.StartProc("tlsbench-openssl", nil, bin, "server", "0", cert, key, pskHex)
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
		return nil, 0, fmt.Errorf("the OpenSSL helper said %q", l)
	}
	return p, port, nil
}

// opensslClient runs k connections of mode against port with the helper.
func opensslClient(ctx context.Context, bin string, port, k int, mode, group, pskHex, caFile string) (Sample, error) {
	out, err := exec.CommandContext(ctx, bin, "client", "127.0.0.1", strconv.Itoa(port), strconv.Itoa(k), mode, group, pskHex, caFile).CombinedOutput()
	if err != nil {
		return Sample{}, fmt.Errorf("OpenSSL helper client: %v: %s", err, strings.TrimSpace(string(out)))
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
	return Sample{}, fmt.Errorf("the OpenSSL helper said %q", out)
}
