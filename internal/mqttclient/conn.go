package mqttclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Conn is one MQTT client connection: packets out through a buffered writer (one flush
// for a run of packets; safe from several goroutines), packets in through Read (from
// one goroutine).
type Conn struct {
	nc      net.Conn
	r       *bufio.Reader
	version byte
	maxIn   int

	wmu sync.Mutex
	w   *bufio.Writer
	buf bytes.Buffer
}

// New wraps an open connection (TCP or TLS) for MQTT version (4: 3.1.1, 5); maxIn
// bounds a packet read from the broker.
func New(nc net.Conn, version byte, maxIn int) *Conn {
	return &Conn{nc: nc, r: bufio.NewReaderSize(nc, 32<<10), w: bufio.NewWriterSize(nc, 32<<10), version: version, maxIn: maxIn}
}

// Version is the connection's MQTT version (4 or 5).
func (c *Conn) Version() byte { return c.version }

// NetConn is the underlying connection (deadlines, closing).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Disconnect sends DISCONNECT (normal disconnection): the broker drops the will and,
// having read everything sent before it, closes the connection.
func (c *Conn) Disconnect() error {
	return c.Write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}})
}

// Read reads the next packet the broker sends.
func (c *Conn) Read() (packets.Packet, error) { return ReadPacket(c.r, c.version, c.maxIn) }

// Write encodes and sends packets, flushing once.
func (c *Conn) Write(pks ...*packets.Packet) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for _, pk := range pks {
		pk.ProtocolVersion = c.version
		c.buf.Reset()
		if err := encodePacket(pk, &c.buf); err != nil {
			return err
		}
		if _, err := c.w.Write(c.buf.Bytes()); err != nil {
			return err
		}
	}
	return c.w.Flush()
}

func encodePacket(pk *packets.Packet, buf *bytes.Buffer) error {
	switch pk.FixedHeader.Type {
	case packets.Connect:
		return pk.ConnectEncode(buf)
	case packets.Publish:
		return pk.PublishEncode(buf)
	case packets.Puback:
		return pk.PubackEncode(buf)
	case packets.Pubrec:
		return pk.PubrecEncode(buf)
	case packets.Pubrel:
		return pk.PubrelEncode(buf)
	case packets.Pubcomp:
		return pk.PubcompEncode(buf)
	case packets.Subscribe:
		return pk.SubscribeEncode(buf)
	case packets.Pingreq:
		return pk.PingreqEncode(buf)
	case packets.Disconnect:
		return pk.DisconnectEncode(buf)
	}
	return fmt.Errorf("mqtt client: cannot send packet type %d", pk.FixedHeader.Type)
}

// ErrMalformed wraps what a broker sent that is not MQTT.
var ErrMalformed = errors.New("mqtt client: malformed packet from the broker")

// ReadPacket reads one packet a broker sends a client (CONNACK, PUBLISH, the acks,
// SUBACK, UNSUBACK, PINGRESP, DISCONNECT, AUTH) of at most max bytes.
func ReadPacket(r *bufio.Reader, version byte, max int) (packets.Packet, error) {
	var pk packets.Packet
	pk.ProtocolVersion = version
	hb, err := r.ReadByte()
	if err != nil {
		return pk, err
	}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		return pk, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return pk, io.ErrUnexpectedEOF
		}
		return pk, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if n > max {
		return pk, fmt.Errorf("%w: a packet of %d bytes (the client takes %d)", ErrMalformed, n, max)
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			return pk, io.ErrUnexpectedEOF
		}
		return pk, err
	}
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
		if err == nil && pk.FixedHeader.Qos > 0 && pk.PacketID == 0 {
			err = errors.New("a QoS 1 or 2 PUBLISH without a packet id")
		}
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Unsuback:
		err = pk.UnsubackDecode(body)
	case packets.Pingresp:
		err = pk.PingrespDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	case packets.Auth:
		err = pk.AuthDecode(body)
	default:
		err = fmt.Errorf("packet type %d is not one a broker sends", pk.FixedHeader.Type)
	}
	if err != nil {
		return pk, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return pk, nil
}
