package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
)

// HostCA trusts any hub whose host certificate a trusted CA signed for the address the
// agent dials (OpenSSH's @cert-authority): a fleet then trusts every hub of a
// deployment, and every host key rotation, by one line.
type HostCA struct {
	cas     []ssh.PublicKey
	checker ssh.CertChecker
}

// CertHostKeyAlgorithms are the host key algorithms an agent trusting a CA asks for:
// certificates, strongest and smallest first, then plain keys, which HostCA refuses
// with a message that says why (rather than a failed negotiation).
var CertHostKeyAlgorithms = append([]string{ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01,
	ssh.CertAlgoECDSA521v01, ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01}, hostKeyPreference...)

// TrustHostCA reads the CA keys from text: authorized_keys lines, optionally as
// known_hosts "@cert-authority PATTERN KEY" lines, or a file holding them.
func TrustHostCA(text string) (*HostCA, error) {
	src := text
	if !strings.Contains(text, " ") {
		b, err := os.ReadFile(text)
		if err != nil {
			return nil, fmt.Errorf("agent: hub CA: %w", err)
		}
		src = string(b)
	}
	h := &HostCA{}
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "@cert-authority "); ok {
			if _, key, ok := strings.Cut(strings.TrimSpace(rest), " "); ok {
				line = key
			}
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("agent: hub CA %q: %v", line, err)
		}
		h.cas = append(h.cas, k)
	}
	if len(h.cas) == 0 {
		return nil, fmt.Errorf("agent: hub CA: no key in %q", text)
	}
	h.checker = ssh.CertChecker{IsHostAuthority: func(auth ssh.PublicKey, _ string) bool {
		for _, ca := range h.cas {
			if bytes.Equal(ca.Marshal(), auth.Marshal()) {
				return true
			}
		}
		return false
	}}
	return h, nil
}

// Check is the handshake's host key callback: a host certificate of a trusted CA,
// valid now, naming the host the agent dialled.
func (h *HostCA) Check(host string, remote net.Addr, key ssh.PublicKey) error {
	if _, ok := key.(*ssh.Certificate); !ok {
		return fmt.Errorf("the hub showed a plain key; this agent trusts hubs by their CA's certificate only")
	}
	return h.checker.CheckHostKey(host, remote, key)
}

// ToProve asks for no proofs: a CA's certificate, not a pinned key, is what is trusted.
func (h *HostCA) ToProve(string, net.Addr, []ssh.PublicKey) []ssh.PublicKey { return nil }

// Proven has nothing to learn.
func (h *HostCA) Proven(*slog.Logger, string, net.Addr, []ssh.PublicKey, []ssh.PublicKey) error {
	return nil
}

// Retired has nothing to forget.
func (h *HostCA) Retired(*slog.Logger, string, []ssh.PublicKey) error { return nil }
