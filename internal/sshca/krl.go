package sshca

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"golang.org/x/crypto/ssh"
)

// KRL wire constants (OpenSSH's PROTOCOL.krl).
const (
	krlMagic           = 0x5353484b524c0a00 // "SSHKRL\n\0"
	krlFormatVersion   = 1
	krlSectionCerts    = 1
	krlSectionExplicit = 2
	krlCertSerialList  = 0x20
)

// Revoked is what a KRL revokes: serials per CA key, and keys (each certificate of a
// revoked key is revoked too).
type Revoked struct {
	Serials map[string][]uint64 // CA public key (authorized_keys form) -> serials
	Keys    []string            // authorized_keys form
}

// MarshalKRL writes an OpenSSH KRL (ssh-keygen -Q -f FILE checks keys and certificates
// against it; sshd takes it as RevokedKeys). version should grow with each KRL made;
// the registry's newest change id does.
func MarshalKRL(r Revoked, version uint64, now time.Time, comment string) ([]byte, error) {
	var b []byte
	b = binary.BigEndian.AppendUint64(b, krlMagic)
	b = binary.BigEndian.AppendUint32(b, krlFormatVersion)
	b = binary.BigEndian.AppendUint64(b, version)
	b = binary.BigEndian.AppendUint64(b, uint64(now.Unix()))
	b = binary.BigEndian.AppendUint64(b, 0) // flags
	b = appendString(b, nil)                // reserved
	b = appendString(b, []byte(comment))

	cas := make([]string, 0, len(r.Serials))
	for ca := range r.Serials {
		cas = append(cas, ca)
	}
	slices.Sort(cas)
	for _, line := range cas {
		ca, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("sshca: KRL: CA %w", err)
		}
		serials := slices.Compact(slices.Sorted(slices.Values(r.Serials[line])))
		var list []byte
		for _, s := range serials {
			list = binary.BigEndian.AppendUint64(list, s)
		}
		var sec []byte
		sec = appendString(sec, ca.Marshal())
		sec = appendString(sec, nil) // reserved
		sec = append(sec, krlCertSerialList)
		sec = appendString(sec, list)
		b = append(b, krlSectionCerts)
		b = appendString(b, sec)
	}

	var blobs [][]byte
	for _, line := range r.Keys {
		k, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("sshca: KRL: key %w", err)
		}
		blobs = append(blobs, k.Marshal())
	}
	slices.SortFunc(blobs, bytes.Compare)
	blobs = slices.CompactFunc(blobs, bytes.Equal)
	if len(blobs) > 0 {
		var sec []byte
		for _, blob := range blobs {
			sec = appendString(sec, blob)
		}
		b = append(b, krlSectionExplicit)
		b = appendString(b, sec)
	}
	return b, nil
}

func parseLine(line string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("%q: %v", line, err)
	}
	return k, nil
}

func appendString(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
