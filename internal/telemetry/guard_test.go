package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
)

// One device cannot fill the store (issue 48, item 8): past its burst of messages, or
// of bytes, its appends are refused with the setting to raise and when to retry, while
// other devices go on; nothing refused is stored.
func TestDeviceBudgets(t *testing.T) {
	ctx := context.Background()
	// Refills are too slow to matter during the test: what passes is the burst.
	s := open(t, t.TempDir(), Config{DeviceRate: 0.001, DeviceBurst: 3, DeviceBytesRate: 100})
	for i := range 3 {
		if _, err := s.Append(ctx, note("dev1", "t")); err != nil {
			t.Fatalf("within the burst, %d: %v", i, err)
		}
	}
	_, err := s.Append(ctx, note("dev1", "t"))
	var rate *RateError
	if !errors.As(err, &rate) || !errors.Is(err, ErrRateLimited) || rate.Limit != "telemetry.device_rate" || rate.RetryAfter <= 0 {
		t.Fatalf("past the burst: %v", err)
	}
	if err := s.Admit("dev1", 1, 10); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("an MQTT publish that is not stored, past the burst: %v", err)
	}
	if _, err := s.Append(ctx, note("dev2", "t")); err != nil {
		t.Fatalf("another device: %v", err)
	}
	big := Notification{Device: "dev3", Name: "blob", Parameters: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}
	if _, err := s.Append(ctx, big); !errors.As(err, &rate) || rate.Limit != "telemetry.device_bytes_rate" {
		t.Fatalf("past the byte burst: %v", err)
	}
	if n, _ := s.List(ctx, Filter{Devices: []string{"dev1", "dev3"}}); len(n) != 3 {
		t.Fatalf("stored %d, want the 3 within dev1's burst", len(n))
	}
}

// Below telemetry.min_free_mib the store refuses notifications and commands with a clear
// error before writing; reads go on.
func TestDiskGuard(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if pgscratch.OnPostgres() {
		t.Skip("a PostgreSQL store is guarded by its database server")
	}
	s := open(t, dir, Config{MinFreeMiB: 1 << 40}) // more than any disk has
	_, err := s.Append(ctx, note("dev1", "t"))
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "telemetry.min_free_mib") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("append on a full disk: %v", err)
	}
	if _, err := s.InsertCommand(ctx, Command{Device: "dev1", Name: "open"}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("command on a full disk: %v", err)
	}
	if _, err := s.List(ctx, Filter{Devices: []string{"dev1"}}); err != nil {
		t.Fatalf("reading on a full disk: %v", err)
	}
}

// telemetry.max_per_device holds as a device writes (issue 48, item 8), not only at the
// hourly pass: a device writing past it keeps its newest, within a hundredth of the cap.
func TestMaxPerDeviceAtWriteTime(t *testing.T) {
	ctx := context.Background()
	cfg := Config{MaxPerDevice: 5}
	cfg.LiftDeviceBudgets()
	pruned := make(chan string, 100)
	s, err := Open(ctx, location(t, t.TempDir()), cfg, Options{capPruned: func(d string) { pruned <- d }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range 20 {
		if _, err := s.Append(ctx, note("dev1", fmt.Sprintf("n%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Prunes run beside the writer, one at a time per device: after the last append's
	// own one, the device is at the cap.
	for {
		<-pruned
		kept, _ := s.List(ctx, Filter{Devices: []string{"dev1"}})
		if len(kept) == 5 && kept[len(kept)-1].Name == "n19" {
			return
		}
		if len(kept) < 5 {
			t.Fatalf("kept %d, want the newest 5", len(kept))
		}
		// A prune that started before the last appends: append once more to start another.
		if _, err := s.Append(ctx, note("dev1", "n19")); err != nil {
			t.Fatal(err)
		}
	}
}
