package zmux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire format, inside the deflate stream: a frame is a type byte, the stream id as an
// unsigned varint, then a body that depends on the type. Strings are a varint length
// and bytes.
//
//	open    kind(1) host(str) port(varint) origin-host(str) origin-port(varint)
//	data    length(varint, 1..MaxData) bytes
//	window  increment(varint, 1..Window)
//	eof     (no body): the sender will write no more on this stream
//	reset   reason(str): the stream is aborted both ways (refused, if not yet served)
//	settings window(varint, Window..MaxWindow), stream id 0: version 2 only, sent once
//	        by each side first: its receive window per stream (before it arrives the
//	        peer assumes Window)
type frameType byte

const (
	frameOpen   frameType = 1
	frameData   frameType = 2
	frameWindow frameType = 3
	frameEOF    frameType = 4
	frameReset  frameType = 5
	// frameSettings is version 2's session-level frame (stream id 0).
	frameSettings frameType = 6
)

const (
	// Window is each stream's receive credit in bytes, in each direction, in version 1
	// of the framing, and in version 2 until a side's settings frame arrives. A reader
	// that stalls holds at most its window of its peer's data.
	Window = 256 << 10
	// DefaultWindow2 is the receive window a version 2 session announces by default:
	// that of an SSH channel in x/crypto/ssh, so a bulk transfer is not held back by
	// credit round trips through two hops (256 KiB halved a transfer's rate).
	DefaultWindow2 = 2 << 20
	// MaxWindow bounds an announced window and a window increment.
	MaxWindow = 16 << 20
	// MaxData bounds one data frame.
	MaxData = 16 << 10
	// maxHost bounds host names in open frames; maxReason bounds reset reasons.
	maxHost   = 255
	maxReason = 1024
)

// Kind says which forward a stream stands for.
type Kind byte

const (
	// Direct streams are opened by the device: a connection to a direct alias of the hub
	// (direct-tcpip in plain SSH).
	Direct Kind = 1
	// Forwarded streams are opened by the hub: a connection to one of the device's
	// exposed aliases (forwarded-tcpip in plain SSH).
	Forwarded Kind = 2
	// Relayed streams are opened by a central hub on a gateway's multiplexed channel: a
	// connection to a device behind the gateway. Host is DEVICE/ALIAS (device@iotsafe.dev
	// in plain SSH).
	Relayed Kind = 3
)

// Target describes what a stream is for, as the SSH open payloads do.
type Target struct {
	Kind       Kind
	Host       string // direct: the alias; forwarded: the alias the device exposed; relayed: DEVICE/ALIAS
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// ErrProtocol is wrapped by every error about a malformed or disallowed frame.
var ErrProtocol = errors.New("zmux: protocol error")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

type frame struct {
	typ    frameType
	id     uint64
	target Target // open
	data   []byte // data; aliases the reader's buffer
	incr   uint64 // window; the announced window of settings
	reason string // reset
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendHeader(b []byte, t frameType, id uint64) []byte {
	return binary.AppendUvarint(append(b, byte(t)), id)
}

func appendOpen(b []byte, id uint64, t Target) []byte {
	b = append(appendHeader(b, frameOpen, id), byte(t.Kind))
	b = appendString(b, t.Host)
	b = binary.AppendUvarint(b, uint64(t.Port))
	b = appendString(b, t.OriginHost)
	return binary.AppendUvarint(b, uint64(t.OriginPort))
}

func appendData(b []byte, id uint64, p []byte) []byte {
	b = binary.AppendUvarint(appendHeader(b, frameData, id), uint64(len(p)))
	return append(b, p...)
}

func appendWindow(b []byte, id uint64, n uint64) []byte {
	return binary.AppendUvarint(appendHeader(b, frameWindow, id), n)
}

func appendSettings(b []byte, window uint64) []byte {
	return binary.AppendUvarint(appendHeader(b, frameSettings, 0), window)
}

func appendReset(b []byte, id uint64, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	return appendString(appendHeader(b, frameReset, id), reason)
}

// frameReader is what frames are decoded from (a bufio.Reader, a burstReader).
type frameReader interface {
	io.Reader
	io.ByteReader
}

// readFrame decodes one frame. buf must hold MaxData bytes; a data frame's payload is
// read into it. io.EOF means the stream ended cleanly between frames.
func readFrame(r frameReader, buf []byte) (frame, error) {
	var f frame
	t, err := r.ReadByte()
	if err != nil {
		return f, err
	}
	f.typ = frameType(t)
	if f.id, err = readUvarint(r, "stream id"); err != nil {
		return f, err
	}
	if (f.id == 0) != (f.typ == frameSettings) {
		return f, protoErr("frame type %d with stream id %d", f.typ, f.id)
	}
	switch f.typ {
	case frameOpen:
		k, err := r.ReadByte()
		if err != nil {
			return f, unexpected(err)
		}
		f.target.Kind = Kind(k)
		if f.target.Kind != Direct && f.target.Kind != Forwarded && f.target.Kind != Relayed {
			return f, protoErr("unknown stream kind %d", k)
		}
		if f.target.Host, err = readString(r, maxHost, "host"); err != nil {
			return f, err
		}
		if f.target.Port, err = readPort(r); err != nil {
			return f, err
		}
		if f.target.OriginHost, err = readString(r, maxHost, "origin host"); err != nil {
			return f, err
		}
		if f.target.OriginPort, err = readPort(r); err != nil {
			return f, err
		}
	case frameData:
		n, err := readUvarint(r, "data length")
		if err != nil {
			return f, err
		}
		if n == 0 || n > MaxData {
			return f, protoErr("data frame of %d bytes (1 to %d allowed)", n, MaxData)
		}
		f.data = buf[:n]
		if _, err := io.ReadFull(r, f.data); err != nil {
			return f, unexpected(err)
		}
	case frameWindow:
		if f.incr, err = readUvarint(r, "window increment"); err != nil {
			return f, err
		}
		if f.incr == 0 || f.incr > MaxWindow {
			return f, protoErr("window increment %d (1 to %d allowed)", f.incr, MaxWindow)
		}
	case frameSettings:
		if f.incr, err = readUvarint(r, "window"); err != nil {
			return f, err
		}
		if f.incr < Window || f.incr > MaxWindow {
			return f, protoErr("announced window %d (%d to %d allowed)", f.incr, Window, MaxWindow)
		}
	case frameEOF:
	case frameReset:
		if f.reason, err = readString(r, maxReason, "reset reason"); err != nil {
			return f, err
		}
	default:
		return f, protoErr("unknown frame type %d", t)
	}
	return f, nil
}

// unexpected turns a clean EOF inside a frame into a truncation error.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func readUvarint(r frameReader, what string) (uint64, error) {
	v, err := binary.ReadUvarint(r)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, io.ErrUnexpectedEOF
		}
		return 0, protoErr("%s: %v", what, err)
	}
	return v, nil
}

func readPort(r frameReader) (uint32, error) {
	v, err := readUvarint(r, "port")
	if err != nil {
		return 0, err
	}
	if v > 65535 {
		return 0, protoErr("port %d", v)
	}
	return uint32(v), nil
}

func readString(r frameReader, limit int, what string) (string, error) {
	n, err := readUvarint(r, what+" length")
	if err != nil {
		return "", err
	}
	if n > uint64(limit) {
		return "", protoErr("%s of %d bytes (at most %d)", what, n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", unexpected(err)
	}
	return string(b), nil
}
