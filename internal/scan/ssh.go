package scan

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/kexinit"
)

// readSSHBanner reads the server's identification line (lines before it are allowed,
// RFC 4253, 4.2), at most 32 lines of 255 bytes.
func readSSHBanner(r *bufio.Reader) (string, error) {
	for range 32 {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return "", fmt.Errorf("no SSH identification: %w", err)
		}
		if len(line) > 255 {
			return "", errors.New("an identification line longer than 255 bytes")
		}
		s := strings.TrimRight(string(line), "\r\n")
		if strings.HasPrefix(s, "SSH-") {
			return s, nil
		}
	}
	return "", errors.New("no SSH identification in 32 lines")
}

// differing is the server-to-client list when it differs from the client-to-server one.
func differing(s2c, c2s []string) []string {
	if slices.Equal(s2c, c2s) {
		return nil
	}
	return s2c
}

// rateSSH rates one SSH algorithm of a kind (kex, hostkey, cipher, mac).
func rateSSH(kind, name string) (Severity, string) {
	switch kind {
	case "kex":
		switch {
		case name == "diffie-hellman-group1-sha1" || strings.Contains(name, "gss-group1"):
			return Insecure, "1024-bit group with SHA-1 (Logjam)"
		case strings.HasSuffix(name, "-sha1"):
			return Weak, "SHA-1"
		case strings.HasPrefix(name, "ecdh-sha2-nistp"):
			return Info, "NIST curve"
		}
	case "hostkey":
		switch {
		case name == "ssh-dss":
			return Insecure, "DSA (1024 bits, removed from OpenSSH)"
		case name == "ssh-rsa" || name == "ssh-rsa-cert-v01@openssh.com":
			return Weak, "RSA signatures with SHA-1"
		}
	case "cipher":
		switch {
		case strings.HasPrefix(name, "arcfour") || strings.HasPrefix(name, "blowfish") || strings.HasPrefix(name, "cast128") || name == "none":
			return Insecure, "broken or no encryption"
		case strings.HasPrefix(name, "3des"):
			return Weak, "3DES: 64-bit blocks"
		case strings.HasSuffix(name, "-cbc"):
			return Weak, "CBC mode (plaintext recovery attacks on SSH)"
		}
	case "mac":
		switch {
		case strings.Contains(name, "md5") || name == "none":
			return Insecure, "MD5 or no MAC"
		case strings.Contains(name, "-96"):
			return Weak, "truncated to 96 bits"
		case strings.HasPrefix(name, "hmac-sha1") || strings.HasPrefix(name, "umac-64"):
			return Weak, "SHA-1 or 64-bit tag"
		case !strings.Contains(name, "-etm@"):
			// Dropbear (2022.83, in Debian) has no encrypt-then-MAC: a hub that serves it
			// keeps these; they are unused with the AEAD ciphers.
			return Info, "MAC-then-encrypt (encrypt-then-MAC and AEAD ciphers are preferred)"
		}
	}
	return Good, ""
}

// ScanSSH reads an SSH server's identification and first key-exchange message and rates
// every algorithm it offers, and whether it takes the strict key exchange (Terrapin).
func ScanSSH(ctx context.Context, addr string, o Options) *Report {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	r := &Report{Target: addr, Proto: "ssh"}
	c, err := o.dial(ctx, addr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(o.Timeout))
	br := bufio.NewReader(c)
	banner, err := readSSHBanner(br)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.add("banner", Info, "%s", banner)
	if _, err := io.WriteString(c, "SSH-2.0-iotsafe_scan\r\n"); err != nil {
		r.Error = err.Error()
		return r
	}
	k, err := kexinit.Parse(br)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	strict := false
	for _, kind := range []struct {
		name string
		list []string
	}{{"kex", k.Kex}, {"hostkey", k.HostKeys}, {"cipher", k.CiphersC2S}, {"cipher", differing(k.CiphersS2C, k.CiphersC2S)},
		{"mac", k.MACsC2S}, {"mac", differing(k.MACsS2C, k.MACsC2S)}} {
		var offered []string
		for _, a := range kind.list {
			if a == "kex-strict-s-v00@openssh.com" {
				strict = true
				continue
			}
			if kind.name == "kex" && kexinit.IsSignal(a) {
				continue
			}
			offered = append(offered, a)
			if sev, why := rateSSH(kind.name, a); sev != Good {
				r.add(kind.name, sev, "%s: %s", a, why)
			}
		}
		if len(offered) > 0 {
			r.add(kind.name, Info, "offered: %s", strings.Join(offered, " "))
		}
	}
	// Key exchanges without post-quantum protection, where the server has a hybrid: a
	// client that lacks the hybrid falls back to one, and what it carries can be recorded
	// now and decrypted later.
	if slices.ContainsFunc(k.Kex, postQuantum) {
		var classical []string
		for _, a := range k.Kex {
			if !postQuantum(a) && !strings.HasPrefix(a, "ext-info-") && !strings.HasPrefix(a, "kex-strict-") {
				classical = append(classical, a)
			}
		}
		if len(classical) > 0 {
			r.add("kex", Info, "not post-quantum, beside the hybrid: %s (a client without the hybrid falls back to one of them)", strings.Join(classical, " "))
		}
	} else {
		r.add("kex", Info, "no post-quantum hybrid key exchange offered (mlkem768x25519-sha256, sntrup761x25519-sha512): sessions recorded now can be decrypted by a future quantum computer")
	}
	if strict {
		r.add("kex", Good, "strict key exchange (kex-strict-s-v00@openssh.com): Terrapin closed")
	} else {
		r.add("kex", Weak, "no strict key exchange: open to Terrapin (CVE-2023-48795) with chacha20-poly1305 or -etm MACs")
	}
	if slices.Contains(k.Compression, "zlib") {
		r.add("compression", Info, "zlib before authentication offered")
	}
	// The keys themselves: their type and size (a 1024-bit RSA key hides behind a good
	// algorithm name).
	scanHostKeys(ctx, r, addr, k.HostKeys, &o)
	if o.KexRate {
		scanKexRate(ctx, r, addr, &o)
	}
	return r
}
