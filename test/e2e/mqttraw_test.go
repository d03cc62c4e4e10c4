package e2e

import (
	"bufio"
	"io"
)

// Raw MQTT for the tests whose client must do what no library does (send past its
// receive maximum, stay silent past its keepalive): packets built and read by hand.

// mqttString is an MQTT UTF-8 string: its length, then its bytes.
func mqttString(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

// mqttPacket is a packet: its first byte, the remaining length, the body.
func mqttPacket(header byte, body []byte) []byte {
	out := []byte{header}
	for n := len(body); ; {
		b := byte(n % 128)
		if n /= 128; n > 0 {
			b |= 0x80
		}
		out = append(out, b)
		if n == 0 {
			break
		}
	}
	return append(out, body...)
}

// mqtt5Connect is an MQTT 5 CONNECT with clean start, no properties, and the given
// keepalive (seconds), credentials ("": none) and will (topic "": none).
func mqtt5Connect(clientID, user, password string, keepalive uint16, willTopic, willPayload string) []byte {
	flags := byte(0x02)
	if willTopic != "" {
		flags |= 0x04 // will, QoS 0, not retained
	}
	if user != "" {
		flags |= 0xC0
	}
	body := append(mqttString("MQTT"), 5, flags, byte(keepalive>>8), byte(keepalive), 0)
	body = append(body, mqttString(clientID)...)
	if willTopic != "" {
		body = append(body, 0) // no will properties
		body = append(append(body, mqttString(willTopic)...), mqttString(willPayload)...)
	}
	if user != "" {
		body = append(append(body, mqttString(user)...), mqttString(password)...)
	}
	return mqttPacket(0x10, body)
}

// readMQTTPacket reads one packet: its first byte and its body.
func readMQTTPacket(r *bufio.Reader) (header byte, body []byte, err error) {
	if header, err = r.ReadByte(); err != nil {
		return 0, nil, err
	}
	n, shift := 0, 0
	for {
		b, err := r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n |= int(b&0x7f) << shift
		if shift += 7; b&0x80 == 0 {
			break
		}
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return header, body, nil
}
