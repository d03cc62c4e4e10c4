package scan

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// sshKexInit is what an SSH server offers in its first key-exchange message.
type sshKexInit struct {
	kex, hostKeys, ciphers, macs []string
	compression                  []string
	ciphersServer, macsServer    []string // server to client, if they differ
}

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

// parseKexInit reads an unencrypted binary packet holding SSH_MSG_KEXINIT.
func parseKexInit(r io.Reader) (*sshKexInit, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	pad := int(hdr[4])
	if n < 1+16+4 || n > 35000 || pad >= int(n) {
		return nil, fmt.Errorf("not an SSH packet (length %d)", n)
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	payload := body[:len(body)-pad]
	if len(payload) < 17 || payload[0] != 20 {
		return nil, errors.New("the first packet is not KEXINIT")
	}
	p := payload[17:]
	var lists [10][]string
	for i := range lists {
		if len(p) < 4 {
			return nil, errors.New("truncated KEXINIT")
		}
		l := binary.BigEndian.Uint32(p)
		if uint64(l) > uint64(len(p)-4) {
			return nil, errors.New("truncated KEXINIT")
		}
		if l > 0 {
			lists[i] = strings.Split(string(p[4:4+l]), ",")
		}
		p = p[4+l:]
	}
	k := &sshKexInit{kex: lists[0], hostKeys: lists[1], ciphers: lists[2], macs: lists[4], compression: lists[6]}
	if !slices.Equal(lists[2], lists[3]) {
		k.ciphersServer = lists[3]
	}
	if !slices.Equal(lists[4], lists[5]) {
		k.macsServer = lists[5]
	}
	return k, nil
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
	k, err := parseKexInit(br)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	strict := false
	for _, kind := range []struct {
		name string
		list []string
	}{{"kex", k.kex}, {"hostkey", k.hostKeys}, {"cipher", k.ciphers}, {"cipher", k.ciphersServer}, {"mac", k.macs}, {"mac", k.macsServer}} {
		var offered []string
		for _, a := range kind.list {
			if a == "kex-strict-s-v00@openssh.com" {
				strict = true
				continue
			}
			if kind.name == "kex" && (strings.HasPrefix(a, "ext-info-") || strings.HasPrefix(a, "kex-strict-")) {
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
	if slices.ContainsFunc(k.kex, postQuantum) {
		var classical []string
		for _, a := range k.kex {
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
	if slices.Contains(k.compression, "zlib") {
		r.add("compression", Info, "zlib before authentication offered")
	}
	// The keys themselves: their type and size (a 1024-bit RSA key hides behind a good
	// algorithm name).
	scanHostKeys(ctx, r, addr, k.hostKeys, &o)
	if o.KexRate {
		scanKexRate(ctx, r, addr, &o)
	}
	return r
}
