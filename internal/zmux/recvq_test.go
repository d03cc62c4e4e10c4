package zmux

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Whatever the frame sizes a peer chooses, a stream's queue keeps the bytes in order and
// holds at most two buffers beyond what it has to hold: the memory budget's assumption.
func TestRecvQueueBoundAndOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sizes := range []func() int{
		func() int { return MaxData },                 // bulk
		func() int { return MaxData/2 + 1 },           // just over half a buffer
		func() int { return 1 },                       // one byte at a time
		func() int { return 1 + rng.IntN(MaxData) },   // anything
		func() int { return MaxData - rng.IntN(100) }, // nearly full
	} {
		var q recvQueue
		var sent bytes.Buffer // written, not yet read back
		for total := 0; total < Window+4*MaxData; {
			bp := dataBufs.Get().(*[]byte)
			n := sizes()
			data := (*bp)[:n]
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			sent.Write(data)
			total += n
			if !q.push(bp, data) {
				dataBufs.Put(bp)
			}
			if held := (len(q.bufs) - q.head) * MaxData; held > q.n+2*MaxData { // a partly read head, a partly filled tail
				t.Fatalf("%d bytes queued in %d buffers (%d bytes)", q.n, len(q.bufs)-q.head, held)
			}
			if rng.IntN(4) == 0 { // the reader takes some now and then
				p := make([]byte, rng.IntN(2*MaxData))
				got := q.read(p)
				if !bytes.Equal(p[:got], sent.Next(got)) {
					t.Fatal("bytes out of order")
				}
			}
		}
		rest := make([]byte, q.n)
		if got := q.read(rest); got != len(rest) || !bytes.Equal(rest, sent.Bytes()) || q.n != 0 || len(q.bufs) != 0 || cap(q.bufs) > keptQueue {
			t.Fatalf("drain: %d of %d bytes, %d left, %d buffers, an array of %d kept", got, len(rest), q.n, len(q.bufs), cap(q.bufs))
		}
	}
}

// A stream whose reader keeps up reuses its queue: bursts of frames pushed and read
// use one array, not a new one per burst.
func TestRecvQueueReusesItsArray(t *testing.T) {
	var q recvQueue
	p := make([]byte, 4*MaxData)
	var array *recvBuf
	for i := range 10 {
		for range 4 {
			bp := dataBufs.Get().(*[]byte)
			if !q.push(bp, (*bp)[:MaxData]) {
				dataBufs.Put(bp)
			}
		}
		if i == 0 {
			array = &q.bufs[0]
		} else if &q.bufs[0] != array {
			t.Fatalf("burst %d went into a new array", i+1)
		}
		if q.read(p) != len(p) || q.n != 0 {
			t.Fatalf("burst %d was not read whole", i+1)
		}
	}
}
