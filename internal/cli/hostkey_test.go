package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mistyped --data is an error for a promotion, not a new empty data folder.
func TestHostkeyPromoteNeedsAnExistingDataFolder(t *testing.T) {
	data := filepath.Join(t.TempDir(), "typo")
	var out, errs bytes.Buffer
	if code := Execute(context.Background(), []string{"hostkey", "promote", "--data", data}, nil, &out, &errs); code == 0 || !strings.Contains(errs.String(), "is --data right?") {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("the folder was created: %v", err)
	}
}
