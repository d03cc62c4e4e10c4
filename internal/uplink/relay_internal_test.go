package uplink

import (
	"context"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// rows is a gateway store as the relay reads it: a fixed list, in id order (the real
// store is covered by the telemetry package's tests and the e2e gateway tests).
type rows []telemetry.Notification

func (r rows) Identity(context.Context) (string, error)             { return "s", nil }
func (r rows) NextCommit() <-chan struct{}                          { return make(chan struct{}) }
func (r rows) SetRelayedUpTo(context.Context, int64, bool) error    { return nil }
func (r rows) RestartRelayAt(context.Context, int64) (int64, error) { return 0, nil }
func (r rows) After(_ context.Context, id int64, limit int) ([]telemetry.Notification, error) {
	var out []telemetry.Notification
	for _, n := range r {
		if n.ID > id && len(out) < limit {
			out = append(out, n)
		}
	}
	return out, nil
}

// A batch stops at its byte budget, always holds at least one notification, and leaves
// out devices revoked here while its mark still covers their ids (so the centre's mark
// moves past them).
func TestNextBatch(t *testing.T) {
	big := `"` + strings.Repeat("x", 60<<10) + `"`
	var store rows
	for i := range 5 {
		dev := "cam-1"
		if i == 1 {
			dev = "gone"
		}
		store = append(store, telemetry.Notification{ID: int64(10 + i), Device: dev, Name: "t", Parameters: []byte(big)})
	}
	u := &Uplink{cfg: Config{Telemetry: store, RelayDevice: func(d string) bool { return d != "gone" }}}
	b, err := u.nextBatch(context.Background(), "s", 9)
	if err != nil {
		t.Fatal(err)
	}
	// 160 KiB holds two of these 60 KiB notifications, the revoked one's among them.
	if b.Upto != 11 || len(b.Items) != 1 || b.Items[0].ID != 10 || b.Items[0].Parameters != big {
		t.Fatalf("first batch: upto %d, %d items", b.Upto, len(b.Items))
	}
	if len(sshext.MarshalTelemetry(b)) > sshext.MaxTelemetryBytes {
		t.Fatalf("a batch of %d bytes", len(sshext.MarshalTelemetry(b)))
	}
	b, _ = u.nextBatch(context.Background(), "s", 11)
	if b.Upto != 13 || len(b.Items) != 2 {
		t.Fatalf("second batch: upto %d, %d items", b.Upto, len(b.Items))
	}
	// One notification over the budget on its own still goes (parameters are bounded
	// far below an SSH packet).
	huge := rows{{ID: 1, Device: "cam-1", Name: "t", Parameters: []byte(`"` + strings.Repeat("y", telemetry.MaxParametersLen-2) + `"`)}}
	u.cfg.Telemetry = huge
	if b, _ = u.nextBatch(context.Background(), "s", 0); len(b.Items) != 1 || b.Upto != 1 {
		t.Fatalf("a large notification: upto %d, %d items", b.Upto, len(b.Items))
	}
	// Nothing after the mark: the mark stays.
	if b, _ = u.nextBatch(context.Background(), "s", 1); len(b.Items) != 0 || b.Upto != 1 {
		t.Fatalf("nothing new: %+v", b)
	}
}
