package sshext

import (
	"reflect"
	"testing"
)

// A batch of notifications and its answer survive the wire as they were.
func TestTelemetryRoundTrip(t *testing.T) {
	b := TelemetryBatch{Source: "abc", Upto: 9, Items: []RelayedNotification{
		{ID: 3, Device: "cam-1", Name: "temp", Parameters: `{"c":21.5}`, DeviceTime: 1_700_000_000_000_000, Stored: 1_700_000_000_000_001},
		{ID: 7, Device: "cam-2", Name: "bare", Stored: 1},
	}}
	got, err := ParseTelemetry(MarshalTelemetry(b))
	if err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("batch: %+v %v", got, err)
	}
	a := TelemetryAck{Upto: 9, Stored: 1, Duplicates: 1, Refused: []TelemetryRefusal{{Device: "cam-2", Why: "revoked", Revoked: true}}}
	back, err := ParseTelemetryAck(MarshalTelemetryAck(a))
	if err != nil || !reflect.DeepEqual(back, a) {
		t.Fatalf("ack: %+v %v", back, err)
	}
	if empty, err := ParseTelemetry(MarshalTelemetry(TelemetryBatch{Source: "abc", Upto: 4})); err != nil || len(empty.Items) != 0 || empty.Upto != 4 {
		t.Fatalf("an empty batch: %+v %v", empty, err)
	}
}

// Malformed batches are errors, never panics or huge allocations.
func TestTelemetryMalformed(t *testing.T) {
	good := MarshalTelemetry(TelemetryBatch{Source: "s", Upto: 2, Items: []RelayedNotification{{ID: 1, Device: "d", Name: "n"}, {ID: 2, Device: "d", Name: "n"}}})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"cut":            good[:len(good)-3],
		"trailing":       append(append([]byte{}, good...), 0),
		"huge head":      {0xff, 0xff, 0xff, 0xff},
		"bad head":       {0, 0, 0, 1, 7},
		"too many":       MarshalTelemetry(TelemetryBatch{Upto: 1 << 40, Items: ascending(MaxTelemetryBatch + 1)}),
		"not ascending":  MarshalTelemetry(TelemetryBatch{Upto: 5, Items: []RelayedNotification{{ID: 2}, {ID: 2}}}),
		"above the mark": MarshalTelemetry(TelemetryBatch{Upto: 1, Items: []RelayedNotification{{ID: 2}}}),
	} {
		if _, err := ParseTelemetry(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseTelemetryAck([]byte{0, 0, 0, 0}); err == nil {
		t.Error("an ack without its head: accepted")
	}
}

func ascending(n int) []RelayedNotification {
	out := make([]RelayedNotification, n)
	for i := range out {
		out[i].ID = uint64(i + 1)
	}
	return out
}

// FuzzParseTelemetry: whatever a gateway sends, parsing ends in a batch or an error,
// the batch's ids ascend up to its mark, and it encodes back to what parses the same.
func FuzzParseTelemetry(f *testing.F) {
	f.Add(MarshalTelemetry(TelemetryBatch{Source: "abc", Upto: 9, Items: []RelayedNotification{{ID: 3, Device: "cam-1", Name: "temp", Parameters: `{"c":1}`}}}))
	f.Add(MarshalTelemetry(TelemetryBatch{}))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseTelemetry(b)
		if err != nil {
			return
		}
		if len(got.Items) > MaxTelemetryBatch {
			t.Fatalf("%d items", len(got.Items))
		}
		for i, it := range got.Items {
			if it.ID > got.Upto || i > 0 && it.ID <= got.Items[i-1].ID {
				t.Fatalf("ids out of order: %+v", got)
			}
		}
		again, err := ParseTelemetry(MarshalTelemetry(got))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("re-encoding changed %+v into %+v (%v)", got, again, err)
		}
	})
}
