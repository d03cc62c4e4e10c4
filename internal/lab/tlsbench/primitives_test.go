package tlsbench

import "testing"

// openssl speed -mr's result lines, as OpenSSL 3.0 writes them, become fig. 2's figures.
func TestParseOpenSSLSpeed(t *testing.T) {
	out := "+DT:AES-128-GCM:1:1024\n+R:570073:AES-128-GCM:0.590000\n+H:1024\n+F:25:AES-128-GCM:989414833.90\n" +
		"+F2:2:2048:1198.684211:41971.212121\n+F4:3:256:30350.877193:11800.000000\n+F5:3:256:15111.940299:0.000066\n" +
		"+F5:0:253:23403.389831:0.000043\n+F6:0:253:Ed25519:15653.623188:6401.492537\n+F:25:sha256:1088632865.57\n"
	got := map[string]float64{}
	for _, p := range parseOpenSSLSpeed(out) {
		got[p.Name+" "+p.Unit] = p.Value
	}
	want := map[string]float64{"AES-128-GCM MB/s": 989.41483390, "RSA-2048 sign ops/s": 1198.684211, "RSA-2048 verify ops/s": 41971.212121,
		"ECDSA P-256 sign ops/s": 30350.877193, "ECDSA P-256 verify ops/s": 11800, "ECDH P-256 ops/s": 15111.940299, "X25519 ops/s": 23403.389831,
		"Ed25519 sign ops/s": 15653.623188, "Ed25519 verify ops/s": 6401.492537, "SHA-256 MB/s": 1088.63286557}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if d := got[k] - v; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
}

// The wolfSSL helper's speed lines become fig. 2's figures (names with spaces too).
func TestParseHelperSpeed(t *testing.T) {
	got := parseHelperSpeed("wolfssl", "F AES-128-GCM MB/s 52.2\nF ECDSA P-256 sign ops/s 3814.4\nU ECDH P-521 not built\ngarbage\n")
	if len(got) != 2 || got[0] != (Primitive{"wolfssl", "AES-128-GCM", "MB/s", 52.2}) || got[1] != (Primitive{"wolfssl", "ECDSA P-256 sign", "ops/s", 3814.4}) {
		t.Fatalf("%+v", got)
	}
}
