package sshext

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"
)

// The gateway tier (paper 000, three-level scheme): a gateway hub keeps one SSH session
// to a central hub and announces on it the devices connected to the gateway; the centre
// gives each a protected socket of its own and opens a DeviceChannel on the gateway's
// session for every connection to it. Only a session whose profile has a gateway policy
// may send these; the centre refuses them from any other as a violation.
const (
	// AnnounceRequest (gateway to centre, wants a reply): devices connected to the
	// gateway and the aliases each serves. Announcing a device again replaces its
	// aliases. Body: up to MaxAnnounceBatch Announce records (MarshalAnnounces); reply
	// body: one AnnounceReply per record, in order (MarshalAnnounceReplies).
	AnnounceRequest = "announce@iotsafe.dev"
	// WithdrawRequest (gateway to centre): the device left the gateway. Body: Withdraw.
	WithdrawRequest = "withdraw@iotsafe.dev"
	// DeviceChannel (centre to gateway): one connection to a device's alias. Extra
	// data: DeviceOpen.
	DeviceChannel = "device@iotsafe.dev"
	// CloseDeviceRequest (centre to gateway): close the device's session at the gateway
	// (revoked or removed at the centre). Body: CloseDevice.
	CloseDeviceRequest = "close-device@iotsafe.dev"
)

// Announce is the body of an AnnounceRequest: the device, the aliases it serves at the
// gateway, and what the gateway knows of its session (for the centre's 'device show').
type Announce struct {
	Device  string
	Aliases []string // SSH name-list: alias names have no commas
	Key     string   // fingerprint of the key the device logged in with at the gateway
	Client  string   // its SSH client version
	Cipher  string
	Remote  string // its address as the gateway sees it
}

// Bounds of what an Announce carries: what a gateway says of its devices' sessions is
// stored and shown to operators, so each string is short printable ASCII.
const (
	maxAnnounceField = 255 // RFC 4253 bounds an SSH version string at 255 bytes
	maxAnnounceAlias = 64  // aliases of one device
)

// Check says why an announcement must be refused: a field too long, or holding bytes
// that are not printable ASCII (a newline would forge lines in 'device show').
func (a Announce) Check() error {
	if len(a.Aliases) > maxAnnounceAlias {
		return fmt.Errorf("%d aliases: at most %d", len(a.Aliases), maxAnnounceAlias)
	}
	fields := []struct{ name, v string }{{"key", a.Key}, {"client", a.Client}, {"cipher", a.Cipher}, {"remote", a.Remote}}
	for _, al := range a.Aliases {
		fields = append(fields, struct{ name, v string }{"alias", al})
	}
	for _, f := range fields {
		if len(f.v) > maxAnnounceField {
			return fmt.Errorf("%s: %d bytes, at most %d", f.name, len(f.v), maxAnnounceField)
		}
		for i := 0; i < len(f.v); i++ {
			if c := f.v[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("%s %q: only printable ASCII", f.name, f.v)
			}
		}
	}
	return nil
}

// AnnounceReply answers an Announce. Refused says why the whole device was refused
// (Revoked: because it is revoked at the centre, so the gateway closes it); otherwise
// Served are the aliases the centre serves and Why says why the others are not (empty
// when all are).
type AnnounceReply struct {
	Refused string
	Revoked bool
	Served  []string
	Why     string
}

// Withdraw is the body of a WithdrawRequest.
type Withdraw struct{ Device string }

// DeviceOpen is the extra data of a DeviceChannel open: the device and alias, and the
// origin of the connection at the centre.
type DeviceOpen struct {
	Device     string
	Alias      string
	OriginAddr string
	OriginPort uint32
}

// CloseDevice is the body of a CloseDeviceRequest. Revoked says the device is revoked
// or removed at the centre, so the gateway must not take it back in.
type CloseDevice struct {
	Device  string
	Reason  string
	Revoked bool
}

// MaxAnnounceBatch bounds the devices of one AnnounceRequest: a batch of them fits in
// one SSH packet (each record is about 200 bytes) and costs the centre one registry
// transaction instead of several per device.
const MaxAnnounceBatch = 128

// MarshalAnnounces encodes a batch: a uint32 count, then each record as an SSH string.
func MarshalAnnounces(as []Announce) []byte { return marshalList(as) }

// ParseAnnounces decodes a batch; more than MaxAnnounceBatch records, a record that does
// not parse or bytes left over are errors.
func ParseAnnounces(b []byte) ([]Announce, error) { return parseList[Announce](b, MaxAnnounceBatch) }

// MarshalAnnounceReplies encodes the replies to a batch.
func MarshalAnnounceReplies(rs []AnnounceReply) []byte { return marshalList(rs) }

// ParseAnnounceReplies decodes the replies to a batch.
func ParseAnnounceReplies(b []byte) ([]AnnounceReply, error) {
	return parseList[AnnounceReply](b, MaxAnnounceBatch)
}

func marshalList[T any](items []T) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(items)))
	for i := range items {
		rec := ssh.Marshal(&items[i])
		out = binary.BigEndian.AppendUint32(out, uint32(len(rec)))
		out = append(out, rec...)
	}
	return out
}

var errList = errors.New("sshext: malformed list")

func parseList[T any](b []byte, limit int) ([]T, error) {
	if len(b) < 4 {
		return nil, errList
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if n > uint32(limit) {
		return nil, fmt.Errorf("%w: %d records, at most %d", errList, n, limit)
	}
	out := make([]T, 0, n)
	for i := range n {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: record %d cut short", errList, i)
		}
		size := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: record %d longer than the message", errList, i)
		}
		var v T
		if err := ssh.Unmarshal(b[:size], &v); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", errList, i, err)
		}
		out = append(out, v)
		b = b[size:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last record", errList, len(b))
	}
	return out, nil
}
