package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// Why a command failed reaches the journal at error priority ('journalctl -p err'),
// and stays a plain line elsewhere.
func TestFailureLineInJournal(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte("no_such_setting: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	journal, err := os.Create(filepath.Join(t.TempDir(), "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer journal.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(journal.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	args := []string{"hub", "--data", dir}
	if code := Execute(context.Background(), args, nil, io.Discard, journal); code != exitConfig {
		t.Fatalf("exit %d", code)
	}
	b, _ := os.ReadFile(journal.Name())
	if !strings.HasPrefix(string(b), "<3>iotsafe: ") || !strings.Contains(string(b), "no_such_setting") {
		t.Fatalf("in the journal: %q", b)
	}
	var plain bytes.Buffer
	Execute(context.Background(), args, nil, io.Discard, &plain)
	if !strings.HasPrefix(plain.String(), "iotsafe: ") {
		t.Fatalf("elsewhere: %q", plain.String())
	}
}
