package mqttbroker

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Every ack leaves with a reason code MQTT 5 allows it and no user property of the
// packet it answers (issue 54.1); error codes stay as mochi set them.
func TestAckReasonCodesAreValid(t *testing.T) {
	h := new(ackHook)
	for _, c := range []struct {
		typ, in, want byte
	}{
		{packets.Puback, 0x01, 0x00}, // mochi's "granted QoS 1"
		{packets.Puback, 0x10, 0x10}, // no matching subscribers: valid
		{packets.Puback, 0x87, 0x87}, // not authorised: kept
		{packets.Pubrec, 0x02, 0x00},
		{packets.Pubrel, 0x10, 0x00}, // 0x10 is no PUBREL code
		{packets.Pubcomp, 0x00, 0x00},
		{packets.Pubrel, 0x92, 0x92}, // packet identifier not found: kept
	} {
		pk := h.OnPacketEncode(nil, packets.Packet{FixedHeader: packets.FixedHeader{Type: c.typ}, ReasonCode: c.in})
		if pk.ReasonCode != c.want {
			t.Errorf("type %d code %#x: sent %#x, want %#x", c.typ, c.in, pk.ReasonCode, c.want)
		}
	}
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ReasonCodes: []byte{1}}
	sub.Properties.User = []packets.UserProperty{{Key: "a", Val: "2"}}
	if got := h.OnPacketEncode(nil, sub); len(got.Properties.User) != 0 || got.ReasonCodes[0] != 1 {
		t.Errorf("SUBACK: %+v", got)
	}
}
