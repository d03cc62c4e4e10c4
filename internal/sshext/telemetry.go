package sshext

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/crypto/ssh"
)

// A gateway relays the notifications its devices stored there to the centre's store
// on its session (paper 000's three levels, one telemetry store): it asks where the
// centre is in its store, then sends batches in id order, one at a time, each answered
// once the centre has stored it. Only a session whose profile has a gateway policy may
// send these.
const (
	// TelemetryMarkRequest (gateway to centre, wants a reply): the highest id of the
	// gateway's store the centre has. Body: TelemetryMark; reply: TelemetryMarkReply.
	TelemetryMarkRequest = "telemetry-mark@iotsafe.dev"
	// TelemetryRequest (gateway to centre, wants a reply): a batch of notifications.
	// Body: MarshalTelemetry; reply: MarshalTelemetryAck. A refused request (reply
	// false) means the centre keeps no notifications or does not take them from this
	// gateway.
	TelemetryRequest = "telemetry@iotsafe.dev"
)

// TelemetryMark is the body of a TelemetryMarkRequest. Source names the gateway's store
// (its identity); the centre keys its mark by the gateway's name and Source.
type TelemetryMark struct{ Source string }

// TelemetryMarkReply answers a TelemetryMarkRequest.
type TelemetryMarkReply struct{ Upto uint64 }

// TelemetryBatch is the body of a TelemetryRequest: notifications with ascending ids of
// the gateway's store, and Upto, the last id the gateway read (at least the last
// item's), which becomes the centre's mark once the batch is stored.
type TelemetryBatch struct {
	Source string
	Upto   uint64
	Items  []RelayedNotification
}

// RelayedNotification is one notification of a TelemetryBatch.
type RelayedNotification struct {
	ID         uint64 // in the gateway's store
	Device     string
	Name       string
	Parameters string // JSON; "" for none
	DeviceTime uint64 // µs since 1970 UTC; 0 for none
	Stored     uint64 // µs since 1970 UTC: when the gateway stored it
}

// TelemetryAck answers a TelemetryRequest. Retry says the centre could not store the
// batch now (its store is overloaded, its registry busy): send it again later.
// Otherwise Upto is the centre's mark, Stored and Duplicates count the batch's items
// (a duplicate was stored before), and Refused lists the devices whose items the
// centre did not take, with why; their items stay at the gateway alone.
type TelemetryAck struct {
	Retry      bool
	Upto       uint64
	Stored     uint32
	Duplicates uint32
	Refused    []TelemetryRefusal
}

// TelemetryRefusal says why the centre took none of a device's items; Revoked says the
// device is revoked there (the gateway closes it, as for an announcement).
type TelemetryRefusal struct {
	Device  string
	Why     string
	Revoked bool
}

// MaxTelemetryBatch bounds a batch's items. MaxTelemetryBytes bounds its encoding: it
// fits one SSH packet (x/crypto takes up to 256 KiB), and so does any one notification
// (parameters up to 64 KiB).
const (
	MaxTelemetryBatch = 256
	MaxTelemetryBytes = 160 << 10
)

type telemetryHead struct {
	Source string
	Upto   uint64
}

type ackHead struct {
	Retry      bool
	Upto       uint64
	Stored     uint32
	Duplicates uint32
}

// MarshalTelemetry encodes a batch: its head as an SSH string, then its items as a list
// (a uint32 count, each record as an SSH string).
func MarshalTelemetry(b TelemetryBatch) []byte {
	return withHead(ssh.Marshal(telemetryHead{Source: b.Source, Upto: b.Upto}), marshalList(b.Items))
}

// ParseTelemetry decodes a batch; over MaxTelemetryBatch items, ids not ascending or
// above Upto, or bytes that do not parse are errors.
func ParseTelemetry(b []byte) (TelemetryBatch, error) {
	var h telemetryHead
	rest, err := parseHead(b, &h)
	if err != nil {
		return TelemetryBatch{}, err
	}
	items, err := parseList[RelayedNotification](rest, MaxTelemetryBatch)
	if err != nil {
		return TelemetryBatch{}, err
	}
	for i, it := range items {
		if i > 0 && it.ID <= items[i-1].ID || it.ID > h.Upto {
			return TelemetryBatch{}, fmt.Errorf("%w: item %d: ids must ascend up to the batch's mark", errList, i)
		}
	}
	return TelemetryBatch{Source: h.Source, Upto: h.Upto, Items: items}, nil
}

// MarshalTelemetryAck encodes the answer to a batch.
func MarshalTelemetryAck(a TelemetryAck) []byte {
	return withHead(ssh.Marshal(ackHead{Retry: a.Retry, Upto: a.Upto, Stored: a.Stored, Duplicates: a.Duplicates}), marshalList(a.Refused))
}

// ParseTelemetryAck decodes the answer to a batch.
func ParseTelemetryAck(b []byte) (TelemetryAck, error) {
	var h ackHead
	rest, err := parseHead(b, &h)
	if err != nil {
		return TelemetryAck{}, err
	}
	refused, err := parseList[TelemetryRefusal](rest, MaxTelemetryBatch)
	if err != nil {
		return TelemetryAck{}, err
	}
	return TelemetryAck{Retry: h.Retry, Upto: h.Upto, Stored: h.Stored, Duplicates: h.Duplicates, Refused: refused}, nil
}

func withHead(head, list []byte) []byte {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(head)+len(list)), uint32(len(head)))
	return append(append(out, head...), list...)
}

func parseHead(b []byte, into any) ([]byte, error) {
	if len(b) < 4 {
		return nil, errList
	}
	size := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(size) > uint64(len(b)) {
		return nil, fmt.Errorf("%w: head longer than the message", errList)
	}
	if err := ssh.Unmarshal(b[:size], into); err != nil {
		return nil, fmt.Errorf("%w: head: %v", errList, err)
	}
	return b[size:], nil
}
