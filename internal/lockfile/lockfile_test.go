package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestTryLock(t *testing.T) {
	for _, remove := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "x.lock")
		l, err := TryLock(path, remove)
		if err != nil {
			t.Fatal(err)
		}
		var held *HeldError
		if _, err := TryLock(path, remove); !errors.As(err, &held) || held.Holder != strconv.Itoa(os.Getpid()) || !errors.Is(err, ErrHeld) {
			t.Fatalf("second lock: %v", err)
		}
		l.Release()
		if _, err := os.Stat(path); remove != os.IsNotExist(err) {
			t.Fatalf("remove=%v: file after release: %v", remove, err)
		}
		again, err := TryLock(path, remove)
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		again.Release()
		again.Release() // twice is fine
	}
}
