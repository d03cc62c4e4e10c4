package mqttbroker

import (
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// ackHook corrects the acknowledgements mochi (v2.7.9) sends MQTT 5 clients:
//
//   - a PUBACK to a QoS 1 PUBLISH carries reason code 0x01 (mochi takes it from its
//     SUBACK table: "granted QoS 1"), which is no PUBACK code: MQTT 5 allows 0x00 and
//     0x10 below 0x80. The encoder writes it whenever the ack has properties, and
//     paho-mqtt's network thread dies on it (issue 54.1);
//   - every PUBACK, PUBREC, PUBREL and PUBCOMP inherits the properties of the packet it
//     answers (user properties, content type, response topic...), which an ack may not
//     carry: Compatibilities.NoInheritedPropertiesOnAck (set in Start) stops that;
//   - SUBACK and UNSUBACK echo the subscriber's user properties: a server's user
//     properties are its own to send, so they are dropped.
//
// Success codes that are not an ack's own become 0x00; error codes (0x80 and up) and the
// reason string mochi sets with them stay.
type ackHook struct{ mqtt.HookBase }

func (*ackHook) ID() string { return "iotsafe-acks" }

func (*ackHook) Provides(b byte) bool { return b == mqtt.OnPacketEncode }

// validSuccess are the reason codes below 0x80 each ack may carry (MQTT 5 §3.4.2.1,
// §3.5.2.1, §3.6.2.1, §3.7.2.1).
var validSuccess = map[byte]map[byte]bool{
	packets.Puback:  {0x00: true, 0x10: true},
	packets.Pubrec:  {0x00: true, 0x10: true},
	packets.Pubrel:  {0x00: true},
	packets.Pubcomp: {0x00: true},
}

func (*ackHook) OnPacketEncode(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	ok, isAck := validSuccess[pk.FixedHeader.Type]
	if isAck && pk.ReasonCode < 0x80 && !ok[pk.ReasonCode] {
		pk.ReasonCode = 0x00
	}
	if t := pk.FixedHeader.Type; t == packets.Suback || t == packets.Unsuback {
		pk.Properties.User = nil
	}
	return pk
}
