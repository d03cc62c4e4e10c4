package scan

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// errGotHostKey ends a probe's handshake once the server has shown its host key: the
// scan never authenticates (nothing for the server to log but a dropped connection).
var errGotHostKey = errors.New("host key read")

// hostKeyProbes picks one host-key algorithm per key the server can prove: every key
// type has its own key (an RSA key signs for rsa-sha2-512, rsa-sha2-256 and ssh-rsa
// alike). Certificates and algorithms the SSH library cannot verify are skipped.
func hostKeyProbes(offered []string) []string {
	var out []string
	rsaDone := false
	for _, pref := range []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA} {
		for _, a := range offered {
			if a == pref && !rsaDone {
				out, rsaDone = append(out, a), true
			}
		}
	}
	for _, a := range offered {
		switch a {
		case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
			out = append(out, a)
		}
	}
	return out
}

// probeHostKey runs a key exchange offering only alg and returns the key the server
// signed it with.
func probeHostKey(ctx context.Context, addr, alg string, o *Options) (ssh.PublicKey, error) {
	c, err := o.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(o.Timeout))
	var key ssh.PublicKey
	cfg := &ssh.ClientConfig{User: "iotsafe-scan", HostKeyAlgorithms: []string{alg}, ClientVersion: "SSH-2.0-iotsafe_scan",
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { key = k; return errGotHostKey }}
	_, _, _, err = ssh.NewClientConn(c, addr, cfg)
	if key != nil {
		return key, nil
	}
	return nil, err
}

// rateHostKey rates a host key by its type and size, as ssh-audit does: RSA below 2048
// bits fails, below 3072 warns (112-bit strength).
func rateHostKey(k ssh.PublicKey) (Severity, string) {
	desc := k.Type()
	if ck, ok := k.(ssh.CryptoPublicKey); ok {
		if rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey); ok {
			bits := rk.N.BitLen()
			desc = fmt.Sprintf("RSA %d bits", bits)
			switch {
			case bits < 2048:
				return Insecure, desc + ": under 2048 bits, within reach of factoring; use an ed25519 (or RSA 3072+) host key"
			case bits < 3072:
				return Weak, desc + ": 112-bit strength; 3072 bits or ed25519 are recommended"
			}
		}
	}
	if strings.HasPrefix(k.Type(), "ecdsa-") {
		return Info, desc + ": NIST curve"
	}
	return Good, desc
}

// scanHostKeys adds a finding per host key the server proves, with its fingerprint.
func scanHostKeys(ctx context.Context, r *Report, addr string, offered []string, o *Options) {
	for _, alg := range hostKeyProbes(offered) {
		k, err := probeHostKey(ctx, addr, alg, o)
		if err != nil {
			r.add("hostkey", Info, "%s: the key could not be read (%v)", alg, err)
			continue
		}
		sev, why := rateHostKey(k)
		r.add("hostkey", sev, "%s: %s (key %s)", alg, why, ssh.FingerprintSHA256(k))
	}
}
