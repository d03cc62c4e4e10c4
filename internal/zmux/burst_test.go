package zmux

import (
	"bytes"
	"io"
	"testing"
)

// chunks delivers one chunk per Read, as an SSH channel delivers what has arrived.
type chunks [][]byte

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	if (*c)[0] = (*c)[0][n:]; len((*c)[0]) == 0 {
		*c = (*c)[1:]
	}
	return n, nil
}

// TestBurstReaderQuietHoldsNoBuffer: between the frames of a quiet session the reader
// holds no buffer (a hub has thousands of such sessions); bytes arrive intact.
func TestBurstReaderQuietHoldsNoBuffer(t *testing.T) {
	frames := []string{"first frame", "second"}
	src := chunks{[]byte(frames[0]), []byte(frames[1])}
	b := newBurstReader(&src, nil)
	for _, frame := range frames {
		if err := b.wait(); err != nil {
			t.Fatal(err)
		}
		if b.small != nil || b.big != nil {
			t.Fatal("a quiet wait took a buffer")
		}
		got := make([]byte, len(frame))
		for i := range got {
			c, err := b.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			got[i] = c
		}
		if string(got) != frame {
			t.Fatalf("got %q, want %q", got, frame)
		}
	}
	if err := b.wait(); err != io.EOF {
		t.Fatalf("after the end: %v, want EOF", err)
	}
	if b.small != nil || b.big != nil {
		t.Fatal("buffers kept after the end")
	}
}

// TestBurstReaderStreams: while data streams the reader moves to the large buffer and
// waits between frames do not fall back to one-byte reads.
func TestBurstReaderStreams(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	var src chunks
	for rest := data; len(rest) > 0; rest = rest[min(len(rest), burstSize):] {
		src = append(src, rest[:min(len(rest), burstSize)])
	}
	b := newBurstReader(&src, nil)
	var got bytes.Buffer
	reads := 0
	for {
		if err := b.wait(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		reads++
		p := make([]byte, 1000)
		n, err := b.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(p[:n])
		if reads > 8 && b.big == nil && b.rpos < b.wpos {
			t.Fatal("streaming without the large buffer")
		}
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("got %d bytes, want %d, intact", got.Len(), len(data))
	}
}
