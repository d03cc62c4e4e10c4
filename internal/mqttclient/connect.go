package mqttclient

import (
	"fmt"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Options of a CONNECT.
type Options struct {
	ClientID string
	Username string
	Password []byte // sent when not nil
	// Clean asks for a new session (3.1.1 clean session, 5 clean start).
	Clean     bool
	Keepalive time.Duration
	// MQTT 5: SessionExpiry keeps the session after a disconnection; ReceiveMaximum
	// bounds the QoS 1/2 messages the broker sends before our acks. The largest packet
	// we take is the connection's bound (New's maxIn).
	SessionExpiry  time.Duration
	ReceiveMaximum uint16
}

// Connack is what the broker allows.
type Connack struct {
	SessionPresent bool
	// ReceiveMaximum is how many QoS 1/2 messages may wait for the broker's ack
	// (65,535 when it did not say); MaxQoS the highest QoS it takes.
	ReceiveMaximum int
	MaxQoS         byte
}

// RefusedError is a CONNACK that refuses.
type RefusedError struct {
	Code   byte
	Reason string
}

func (e *RefusedError) Error() string { return "the broker refused the connection: " + e.Reason }

// Connect sends CONNECT and waits up to timeout for CONNACK.
func (c *Conn) Connect(o Options, timeout time.Duration) (Connack, error) {
	pk := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}}
	pk.Connect.ProtocolName = []byte("MQTT")
	pk.Connect.Keepalive = uint16(o.Keepalive / time.Second)
	pk.Connect.ClientIdentifier = o.ClientID
	pk.Connect.Clean = o.Clean
	if o.Username != "" {
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(o.Username)
	}
	if o.Password != nil {
		pk.Connect.PasswordFlag, pk.Connect.Password = true, o.Password
	}
	if c.version == 5 {
		if o.SessionExpiry > 0 {
			pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = uint32(o.SessionExpiry/time.Second), true
		}
		pk.Properties.ReceiveMaximum = o.ReceiveMaximum
		pk.Properties.MaximumPacketSize = uint32(c.maxIn)
	}
	if err := c.Write(pk); err != nil {
		return Connack{}, err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	defer c.nc.SetReadDeadline(time.Time{})
	ack, err := c.Read()
	if err != nil {
		return Connack{}, fmt.Errorf("waiting for CONNACK: %w", err)
	}
	if ack.FixedHeader.Type != packets.Connack {
		return Connack{}, fmt.Errorf("the broker answered CONNECT with packet type %d", ack.FixedHeader.Type)
	}
	if ack.ReasonCode != 0 {
		return Connack{}, &RefusedError{Code: ack.ReasonCode, Reason: connackReason(c.version, ack)}
	}
	out := Connack{SessionPresent: ack.SessionPresent, ReceiveMaximum: 65535, MaxQoS: 2}
	if c.version == 5 {
		if rm := int(ack.Properties.ReceiveMaximum); rm > 0 {
			out.ReceiveMaximum = rm
		}
		if ack.Properties.MaximumQosFlag {
			out.MaxQoS = ack.Properties.MaximumQos
		}
	}
	return out, nil
}

// connackReason names a CONNACK's refusal.
func connackReason(v byte, ack packets.Packet) string {
	if v != 5 {
		switch ack.ReasonCode {
		case 1:
			return "unacceptable protocol version"
		case 2:
			return "client identifier rejected"
		case 3:
			return "server unavailable"
		case 4:
			return "bad user name or password"
		case 5:
			return "not authorised"
		}
		return fmt.Sprintf("return code %d", ack.ReasonCode)
	}
	s := fmt.Sprintf("reason 0x%02x", ack.ReasonCode)
	switch ack.ReasonCode {
	case 0x84:
		s += " (unsupported protocol version)"
	case 0x85:
		s += " (client identifier not valid)"
	case 0x86:
		s += " (bad user name or password)"
	case 0x87:
		s += " (not authorized)"
	case 0x88:
		s += " (server unavailable)"
	case 0x8A:
		s += " (banned)"
	}
	if ack.Properties.ReasonString != "" {
		s += ": " + ack.Properties.ReasonString
	}
	return s
}

// Publish sends one message and waits up to timeout for the broker's side of the
// exchange: nothing at QoS 0, PUBACK at QoS 1, PUBREC then (after our PUBREL) PUBCOMP at
// QoS 2. One message at a time, as mqtt-benchmark's clients: for one-off publishers
// (the demo, tools) and the lab's load generator, not for a stream (which keeps a
// window). Packets of other kinds read meanwhile are skipped.
func (c *Conn) Publish(topic string, payload []byte, qos byte, id uint16, timeout time.Duration) error {
	if qos > 2 {
		return fmt.Errorf("mqtt client: QoS %d does not exist", qos)
	}
	pk := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, TopicName: topic, Payload: payload}
	if qos > 0 {
		pk.PacketID = id
	}
	if err := c.Write(pk); err != nil || qos == 0 {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	defer c.nc.SetReadDeadline(time.Time{})
	want, name := packets.Puback, "PUBACK"
	if qos == 2 {
		want, name = packets.Pubrec, "PUBREC"
	}
	for {
		ack, err := c.Read()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", name, err)
		}
		if ack.FixedHeader.Type == packets.Disconnect {
			return fmt.Errorf("the broker disconnected: reason 0x%02x %s", ack.ReasonCode, ack.Properties.ReasonString)
		}
		if ack.FixedHeader.Type != want || ack.PacketID != id {
			continue
		}
		if ack.ReasonCode >= 0x80 {
			return fmt.Errorf("the broker refused the message: reason 0x%02x %s", ack.ReasonCode, ack.Properties.ReasonString)
		}
		if want != packets.Pubrec {
			return nil
		}
		// QoS 2, second half: release the message and wait for its completion.
		rel := &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: id}
		if err := c.Write(rel); err != nil {
			return err
		}
		want, name = packets.Pubcomp, "PUBCOMP"
	}
}
