package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A write replaces the file whole with the mode asked for, leaves no temporary file
// behind, and CreateOnly refuses to replace one.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := Write(p, []byte("one"), Options{CreateOnly: true}); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), Options{CreateOnly: true}); !errors.Is(err, os.ErrExist) {
		t.Fatalf("CreateOnly over a file: %v", err)
	}
	if err := Write(p, []byte("three"), Options{Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(b) != "three" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("%q %v", b, fi.Mode())
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("left behind: %v", es)
	}
}
