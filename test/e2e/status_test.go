package e2e

import (
	"strings"
	"testing"
)

// With the hub running and no device online, device list says what each device is doing
// (it used to say "unknown (hub not running)").
func TestDeviceListWithNoDeviceOnline(t *testing.T) {
	h := startHub(t, "", "")
	h.addDevice("dev1")
	out := h.mustCLI("device", "list")
	if strings.Contains(out, "hub not running") || !strings.Contains(out, "never connected") {
		t.Fatalf("device list with the hub running and nobody online:\n%s", out)
	}
	h.stop()
	if out := h.mustCLI("device", "list"); !strings.Contains(out, "hub not running") {
		t.Fatalf("device list with the hub stopped:\n%s", out)
	}
}
