package access

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestGroupMembers(t *testing.T) {
	dir := t.TempDir()
	p, g := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	os.WriteFile(p, []byte("# comment\nroot:x:0:0::/:/bin/sh\nops:x:1002:2000::/:/bin/false\nbob:x:1004:1004::/:/bin/false\nbad:x:zz:1::/:\n"), 0o644)
	os.WriteFile(g, []byte("operators:x:2000:bob, nobody-known\nother:x:2001:root\n"), 0o644)
	got := groupMembers(p, g, 2000)
	slices.Sort(got)
	if !slices.Equal(got, []uint32{1002, 1004}) {
		t.Fatalf("members of 2000: %v", got)
	}
	if got := groupMembers(p, g, 9999); len(got) != 0 {
		t.Fatalf("unknown group: %v", got)
	}
}
