package wssec

import (
	"testing"
	"time"
)

// The cost of one message each way, as the hub's endpoint and a device pay it:
// go test -bench . ./internal/wssec
func benchmarkSealOpen(b *testing.B, f Format, suite string) {
	k := testKey(b)
	s, _ := SuiteByName(suite)
	ring := NewKeyring(0)
	r := &Receiver{Policy: LabPolicy(), Key: func(id string) (Key, bool) { return k, true }, Now: func() time.Time { return t0 }, Keyring: ring}
	m := msg(1)
	b.ReportAllocs()
	for b.Loop() {
		out, err := ring.Seal(f, m, s, k)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Open(out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSecRecAES128GCM(b *testing.B) { benchmarkSealOpen(b, SecRec, "aes128-gcm") }
func BenchmarkCSecAES128GCM(b *testing.B)   { benchmarkSealOpen(b, CSec, "aes128-gcm") }
