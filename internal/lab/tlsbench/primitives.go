package tlsbench

import (
	"bufio"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/mlkem"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// Primitive is one measurement of fig. 2: a symmetric primitive's throughput (MB/s on
// PrimitiveBytes-byte buffers) or a public-key operation's rate (ops/s).
type Primitive struct {
	Impl, Name, Unit string
	Value            float64
}

// PrimitiveBytes is the buffer the symmetric primitives process (one TLS record's worth
// of a small device message; openssl speed -bytes takes the same).
const PrimitiveBytes = 1024

// goPrimitives measures Go's primitives, each for d.
func goPrimitives(d time.Duration) ([]Primitive, error) {
	var out []Primitive
	buf := make([]byte, PrimitiveBytes)
	seal := func(name string, a cipher.AEAD) {
		nonce := make([]byte, a.NonceSize())
		dst := make([]byte, 0, len(buf)+a.Overhead())
		n := rate(d, func() { a.Seal(dst[:0], nonce, buf, nil) })
		out = append(out, Primitive{"go", name, "MB/s", n * PrimitiveBytes / 1e6})
	}
	for _, bits := range []int{128, 256} {
		blk, _ := aes.NewCipher(make([]byte, bits/8))
		g, _ := cipher.NewGCM(blk)
		seal(fmt.Sprintf("AES-%d-GCM", bits), g)
	}
	cc, _ := chacha20poly1305.New(make([]byte, chacha20poly1305.KeySize))
	seal("ChaCha20-Poly1305", cc)
	n := rate(d, func() { sha256.Sum256(buf) })
	out = append(out, Primitive{"go", "SHA-256", "MB/s", n * PrimitiveBytes / 1e6})

	// Key exchange: one side's shared-secret computation.
	for _, c := range []struct {
		name  string
		curve ecdh.Curve
	}{{"X25519", ecdh.X25519()}, {"ECDH P-256", ecdh.P256()}, {"ECDH P-384", ecdh.P384()}, {"ECDH P-521", ecdh.P521()}} {
		a, err := c.curve.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		b, _ := c.curve.GenerateKey(rand.Reader)
		out = append(out, Primitive{"go", c.name, "ops/s", rate(d, func() { a.ECDH(b.PublicKey()) })})
	}
	dk, err := mlkem.GenerateKey768()
	if err != nil {
		return nil, err
	}
	_, ct := dk.EncapsulationKey().Encapsulate()
	out = append(out, Primitive{"go", "ML-KEM-768 encapsulate", "ops/s", rate(d, func() { dk.EncapsulationKey().Encapsulate() })},
		Primitive{"go", "ML-KEM-768 decapsulate", "ops/s", rate(d, func() { dk.Decapsulate(ct) })})

	// Signatures, on a 32-byte digest as TLS signs.
	digest := sha256.Sum256([]byte("iotsafe"))
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sig, _ := ecdsa.SignASN1(rand.Reader, ek, digest[:])
	out = append(out, Primitive{"go", "ECDSA P-256 sign", "ops/s", rate(d, func() { ecdsa.SignASN1(rand.Reader, ek, digest[:]) })},
		Primitive{"go", "ECDSA P-256 verify", "ops/s", rate(d, func() { ecdsa.VerifyASN1(&ek.PublicKey, digest[:], sig) })})
	_, edk, _ := ed25519.GenerateKey(rand.Reader)
	esig := ed25519.Sign(edk, digest[:])
	out = append(out, Primitive{"go", "Ed25519 sign", "ops/s", rate(d, func() { ed25519.Sign(edk, digest[:]) })},
		Primitive{"go", "Ed25519 verify", "ops/s", rate(d, func() { ed25519.Verify(edk.Public().(ed25519.PublicKey), digest[:], esig) })})
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	rsig, _ := rsa.SignPKCS1v15(nil, rk, crypto.SHA256, digest[:])
	out = append(out, Primitive{"go", "RSA-2048 sign", "ops/s", rate(d, func() { rsa.SignPKCS1v15(nil, rk, crypto.SHA256, digest[:]) })},
		Primitive{"go", "RSA-2048 verify", "ops/s", rate(d, func() { rsa.VerifyPKCS1v15(&rk.PublicKey, crypto.SHA256, digest[:], rsig) })})
	return out, nil
}

// rate runs fn for about d and returns calls per second.
func rate(d time.Duration, fn func()) float64 {
	n, start := 0, time.Now()
	for {
		for range 16 {
			fn()
		}
		n += 16
		if el := time.Since(start); el >= d {
			return float64(n) / el.Seconds()
		}
	}
}

// opensslPrimitives runs openssl speed (machine-readable output) for the same set, each
// for whole seconds (openssl speed's unit). OpenSSL 3.0 has no ML-KEM.
func opensslPrimitives(ctx context.Context, seconds int, quick bool) ([]Primitive, error) {
	secs := strconv.Itoa(seconds)
	var out []Primitive
	sym := []string{"aes-128-gcm", "aes-256-gcm", "chacha20-poly1305", "sha256"}
	pk := []string{"ecdhx25519", "ecdhp256", "ecdhp384", "ecdhp521", "ecdsap256", "ed25519", "rsa2048"}
	if quick {
		sym, pk = sym[:1], pk[:1]
	}
	for _, alg := range sym {
		p, err := opensslSpeed(ctx, "-seconds", secs, "-bytes", strconv.Itoa(PrimitiveBytes), "-evp", alg)
		if err != nil {
			return out, err
		}
		out = append(out, p...)
	}
	p, err := opensslSpeed(ctx, append([]string{"-seconds", secs}, pk...)...)
	return append(out, p...), err
}

// openSSLNames are fig. 2's names for openssl speed's.
var openSSLNames = map[string]string{"AES-128-GCM": "AES-128-GCM", "AES-256-GCM": "AES-256-GCM", "ChaCha20-Poly1305": "ChaCha20-Poly1305", "sha256": "SHA-256"}

func opensslSpeed(ctx context.Context, args ...string) ([]Primitive, error) {
	out, err := exec.CommandContext(ctx, "openssl", append([]string{"speed", "-mr"}, args...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("openssl speed %s: %v: %.300s", strings.Join(args, " "), err, out)
	}
	return parseOpenSSLSpeed(string(out)), nil
}

// parseOpenSSLSpeed reads openssl speed -mr's result lines: +F (symmetric, bytes/s for
// the one -bytes size), +F2 (RSA) and +F4 (ECDSA) sign/s and verify/s, +F5 (ECDH) ops/s,
// +F6 (EdDSA) sign/s and verify/s.
func parseOpenSSLSpeed(text string) []Primitive {
	var out []Primitive
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		num := func(i int) float64 {
			if i >= len(f) {
				return 0
			}
			v, _ := strconv.ParseFloat(f[i], 64)
			return v
		}
		switch {
		case f[0] == "+F" && len(f) >= 4:
			name, ok := openSSLNames[f[2]]
			if !ok {
				name = f[2]
			}
			out = append(out, Primitive{"openssl", name, "MB/s", num(3) / 1e6})
		case f[0] == "+F2" && len(f) >= 5:
			out = append(out, Primitive{"openssl", "RSA-" + f[2] + " sign", "ops/s", num(3)}, Primitive{"openssl", "RSA-" + f[2] + " verify", "ops/s", num(4)})
		case f[0] == "+F4" && len(f) >= 5:
			out = append(out, Primitive{"openssl", "ECDSA P-" + f[2] + " sign", "ops/s", num(3)}, Primitive{"openssl", "ECDSA P-" + f[2] + " verify", "ops/s", num(4)})
		case f[0] == "+F5" && len(f) >= 4:
			name := "ECDH P-" + f[2]
			if f[2] == "253" {
				name = "X25519"
			}
			out = append(out, Primitive{"openssl", name, "ops/s", num(3)})
		case f[0] == "+F6" && len(f) >= 6:
			out = append(out, Primitive{"openssl", f[3] + " sign", "ops/s", num(4)}, Primitive{"openssl", f[3] + " verify", "ops/s", num(5)})
		}
	}
	return out
}

// wolfCryptPrimitives runs the wolfSSL helper's speed loop (wolfCrypt's own calls, each
// for whole seconds).
func wolfCryptPrimitives(ctx context.Context, bin string, d time.Duration) ([]Primitive, error) {
	out, err := exec.CommandContext(ctx, bin, "speed", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("tlsbench_wolfssl speed: %v: %.300s", err, out)
	}
	return parseHelperSpeed("wolfssl", string(out)), nil
}

// parseHelperSpeed reads "F NAME... UNIT VALUE" lines.
func parseHelperSpeed(impl, text string) []Primitive {
	var out []Primitive
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != "F" {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out = append(out, Primitive{impl, strings.Join(f[1:len(f)-2], " "), f[len(f)-2], v})
	}
	return out
}
