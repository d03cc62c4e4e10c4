package kexinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MaxPacket bounds the packet Parse accepts (RFC 4253 asks for 35000 at least).
const MaxPacket = 35000

// Offer is one side's KEXINIT: its algorithm lists in order of preference.
type Offer struct {
	Kex         []string `json:"kex"`
	HostKeys    []string `json:"host_keys"`
	CiphersC2S  []string `json:"ciphers_c2s"`
	CiphersS2C  []string `json:"ciphers_s2c"`
	MACsC2S     []string `json:"macs_c2s"`
	MACsS2C     []string `json:"macs_s2c"`
	Compression []string `json:"compression"`
}

// KexAlgorithms is Kex without the pseudo-algorithms that only signal extensions
// (ext-info-c, kex-strict-c-v00@openssh.com and their server forms).
func (o *Offer) KexAlgorithms() []string {
	return slices.DeleteFunc(slices.Clone(o.Kex), IsSignal)
}

// IsSignal reports whether a kex name is an extension signal, not an algorithm.
func IsSignal(name string) bool {
	return strings.HasPrefix(name, "ext-info-") || strings.HasPrefix(name, "kex-strict-")
}

// Parse reads one unencrypted binary packet holding SSH_MSG_KEXINIT.
func Parse(r io.Reader) (*Offer, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	pad := int(hdr[4])
	if n < 1+16+4 || n > MaxPacket || pad >= int(n) {
		return nil, fmt.Errorf("not an SSH packet (length %d)", n)
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return parsePayload(body[:len(body)-pad])
}

func parsePayload(payload []byte) (*Offer, error) {
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
	return &Offer{Kex: lists[0], HostKeys: lists[1], CiphersC2S: lists[2], CiphersS2C: lists[3],
		MACsC2S: lists[4], MACsS2C: lists[5], Compression: lists[6]}, nil
}
