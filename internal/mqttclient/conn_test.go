package mqttclient

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// encoded is a packet as the centre would send it.
func encoded(t testing.TB, pk packets.Packet, version byte) []byte {
	var buf bytes.Buffer
	pk.ProtocolVersion = version
	if err := encodePacket(&pk, &buf); err != nil {
		if pk.FixedHeader.Type == packets.Connack {
			pk.ConnackEncode(&buf)
			return buf.Bytes()
		}
		if pk.FixedHeader.Type == packets.Suback {
			pk.SubackEncode(&buf)
			return buf.Bytes()
		}
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadPacket(t *testing.T) {
	pub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "site1/commands/x", Payload: []byte("hello"), PacketID: 7}
	for _, v := range []byte{4, 5} {
		raw := encoded(t, pub, v)
		pk, err := ReadPacket(bufio.NewReader(bytes.NewReader(raw)), v, 1024)
		if err != nil || pk.TopicName != pub.TopicName || string(pk.Payload) != "hello" || pk.PacketID != 7 {
			t.Fatalf("v%d: %+v %v", v, pk, err)
		}
		// Too large for the bridge: refused before reading the body.
		if _, err := ReadPacket(bufio.NewReader(bytes.NewReader(raw)), v, 8); !errors.Is(err, ErrMalformed) {
			t.Fatalf("v%d: oversized packet: %v", v, err)
		}
		// Cut short: an unexpected EOF, not a packet.
		if _, err := ReadPacket(bufio.NewReader(bytes.NewReader(raw[:len(raw)-2])), v, 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("v%d: truncated packet: %v", v, err)
		}
	}
	// A packet only clients send (SUBSCRIBE) and a QoS 1 PUBLISH without a packet id.
	for _, raw := range [][]byte{{0x82, 0x05, 0, 1, 0, 1, 'a'}, {0x32, 0x03, 0, 1, 'a'}} {
		if _, err := ReadPacket(bufio.NewReader(bytes.NewReader(raw)), 4, 1024); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: %v", raw, err)
		}
	}
}

// FuzzReadPacket: whatever the centre sends, readPacket returns a packet or an error,
// never panics, and never reads a body larger than its bound.
func FuzzReadPacket(f *testing.F) {
	for _, v := range []byte{4, 5} {
		f.Add(encoded(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "a/b", Payload: []byte("x"), PacketID: 1}, v), v)
		f.Add(encoded(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ReasonCode: 0x86}, v), v)
		f.Add(encoded(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 3, ReasonCode: 0x87}, v), v)
		f.Add(encoded(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, PacketID: 3, ReasonCodes: []byte{1, 0x80}}, v), v)
		f.Add(encoded(f, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ReasonCode: 0x8b}, v), v)
	}
	f.Fuzz(func(t *testing.T, raw []byte, v byte) {
		if v != 4 && v != 5 {
			return
		}
		r := bufio.NewReader(bytes.NewReader(raw))
		for range 4 {
			pk, err := ReadPacket(r, v, 256)
			if err != nil {
				return
			}
			if pk.FixedHeader.Remaining > 256 || len(pk.Payload) > 256 {
				t.Fatalf("a packet past the bound: %d", pk.FixedHeader.Remaining)
			}
		}
	})
}
