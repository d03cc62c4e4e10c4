package zmux

// recvQueue holds a stream's received, unread bytes in MaxData-sized buffers from
// dataBufs. A full-size data frame's buffer is handed over as it was read (no copy: bulk
// senders send full frames); any other payload is copied into the free end of the last
// buffer and, past it, a new one. So every buffer but the first (partly read) and the
// last is full, and a stalled stream holds at most its window plus two buffers (32 KiB),
// within the hub's memory budget per connection.
// Drained buffers go back to the pool at once: an idle stream holds none.
type recvQueue struct {
	bufs []recvBuf // bufs[head:] hold data
	head int
	n    int // bytes held
}

// keptQueue is the most entries a drained queue keeps its array for: a stream whose
// reader keeps up reuses it rather than allocating one per burst; the array of a long
// backlog goes.
const keptQueue = 8

type recvBuf struct {
	bp   *[]byte // from dataBufs; len(*bp) == MaxData
	r, w int     // unread bytes are (*bp)[r:w]
}

// push adds data, which lies at the start of *bp. It reports whether it kept bp (the
// caller must then take a new buffer for its next frame).
func (q *recvQueue) push(bp *[]byte, data []byte) (kept bool) {
	q.n += len(data)
	if len(data) == MaxData && q.tailFull() {
		q.add(recvBuf{bp: bp, w: len(data)})
		return true
	}
	for len(data) > 0 {
		if q.tailFull() {
			q.add(recvBuf{bp: dataBufs.Get().(*[]byte)})
		}
		last := &q.bufs[len(q.bufs)-1]
		n := copy((*last.bp)[last.w:], data)
		last.w += n
		data = data[n:]
	}
	return false
}

// add appends b, first moving the entries up over those already read when the array
// is full.
func (q *recvQueue) add(b recvBuf) {
	if len(q.bufs) == cap(q.bufs) && q.head > 0 {
		k := copy(q.bufs, q.bufs[q.head:])
		clear(q.bufs[k:])
		q.bufs, q.head = q.bufs[:k], 0
	}
	q.bufs = append(q.bufs, b)
}

// tailFull reports whether the last buffer has no free space (or there is none).
func (q *recvQueue) tailFull() bool {
	return len(q.bufs) == q.head || q.bufs[len(q.bufs)-1].w == MaxData
}

// read copies unread bytes into p.
func (q *recvQueue) read(p []byte) int {
	total := 0
	for len(p) > 0 && q.head < len(q.bufs) {
		b := &q.bufs[q.head]
		n := copy(p, (*b.bp)[b.r:b.w])
		b.r += n
		p = p[n:]
		total += n
		if b.r == b.w {
			dataBufs.Put(b.bp)
			*b = recvBuf{}
			q.head++
		}
	}
	if q.head == len(q.bufs) {
		q.head = 0
		q.bufs = q.bufs[:0]
		if cap(q.bufs) > keptQueue {
			q.bufs = nil
		}
	}
	q.n -= total
	return total
}

// release returns every buffer to the pool (the stream is closed).
func (q *recvQueue) release() {
	for _, b := range q.bufs[q.head:] {
		dataBufs.Put(b.bp)
	}
	q.bufs, q.head, q.n = nil, 0, 0
}
