package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// A wrong hub.yaml exits 78 (EX_CONFIG), which the hub's unit does not retry; a
// registry held by another hub exits 75 (EX_TEMPFAIL); anything else 1.
func TestExitStatus(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte("ssh:\n  listn: 127.0.0.1:2222\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), []string{"hub", "--check-config", "--data", dir}, nil, &out, &errOut)
	if code != exitConfig || !strings.Contains(errOut.String(), "ssh.listn (line 2)") {
		t.Fatalf("a wrong hub.yaml: exit %d, %q", code, errOut.String())
	}
	// The same file for an admin command.
	errOut.Reset()
	if code := Execute(context.Background(), []string{"device", "list", "--data", dir}, nil, &out, &errOut); code != exitConfig {
		t.Fatalf("device list with a wrong hub.yaml: exit %d, %q", code, errOut.String())
	}
	for err, want := range map[error]int{
		fmt.Errorf("registry: lease: %w: hub h1 held by ...", registry.ErrInUse):    exitTempFail,
		fmt.Errorf("%w (postgres): now held by %q", registry.ErrLeaseLost, "other"): exitTempFail,
		errors.New("listen tcp 127.0.0.1:2222: bind: address already in use"):       1,
	} {
		if got := exitStatus(err); got != want {
			t.Errorf("exitStatus(%v) = %d, want %d", err, got, want)
		}
	}
}
