package mqttbridge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
)

// Message is an outgoing message waiting in the queue. Seq orders the queue: it grows
// with every message committed, across restarts.
type Message struct {
	Seq     uint64
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
}

// size is what a message counts against the queue's byte bound.
func (m Message) size() int64 { return int64(len(m.Topic) + len(m.Payload) + 4) }

// ErrFull is Put's answer when the queue is full and its overflow policy is refuse.
var ErrFull = errors.New("mqtt bridge: the queue to the central broker is full")

var bucket = []byte("out")

// Queue is the disk queue of outgoing messages: one bbolt file, written by one goroutine
// that commits whatever is waiting in one transaction (one fsync for many messages), so
// that a message's Put returns once it is on disk.
type Queue struct {
	db   *bbolt.DB
	cfg  QueueConfig
	reqs chan *putReq
	acks chan uint64
	// changed is poked after a commit that added messages.
	changed chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	// closing guards the hand-over of requests against Close: a request handed over
	// before Close is committed by the writer's last round.
	closing sync.RWMutex
	closed  bool

	mu    sync.Mutex
	count int
	bytes int64
	// deleting are acknowledged messages whose deletion is not committed yet: Read skips
	// them, so a reconnection does not send them again.
	deleting map[uint64]bool

	dropped atomic.Int64 // dropped by drop_oldest
}

type putReq struct {
	m    Message
	done chan error
}

// OpenQueue opens (or creates, mode 0600) the queue file.
func OpenQueue(path string, cfg QueueConfig) (*Queue, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("mqtt bridge: queue %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	q := &Queue{db: db, cfg: cfg, reqs: make(chan *putReq, 1024), acks: make(chan uint64, 4096),
		changed: make(chan struct{}, 1), done: make(chan struct{}), deleting: map[uint64]bool{}}
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			m, err := decodeMessage(k, v)
			if err != nil {
				return err
			}
			q.count++
			q.bytes += m.size()
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("mqtt bridge: queue %s: %w", path, err)
	}
	q.wg.Add(1)
	go q.writer()
	return q, nil
}

// Close stops the writer after what is waiting is committed, and closes the file.
func (q *Queue) Close() error {
	q.closing.Lock()
	q.closed = true
	q.closing.Unlock()
	close(q.done)
	q.wg.Wait()
	return q.db.Close()
}

// Put adds a message and returns once it is on disk.
func (q *Queue) Put(ctx context.Context, m Message) error {
	r := &putReq{m: m, done: make(chan error, 1)}
	q.closing.RLock()
	if q.closed {
		q.closing.RUnlock()
		return errors.New("mqtt bridge: queue closed")
	}
	select {
	case q.reqs <- r:
	case <-ctx.Done():
		q.closing.RUnlock()
		return ctx.Err()
	}
	q.closing.RUnlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		// The writer still commits it: the sender may deliver a message whose publisher
		// gave up waiting, which is at-least-once as the publisher sees it.
		return ctx.Err()
	}
}

// Ack marks a message delivered: it is deleted with the writer's next commit.
func (q *Queue) Ack(seq uint64) {
	q.mu.Lock()
	q.deleting[seq] = true
	q.mu.Unlock()
	q.closing.RLock()
	defer q.closing.RUnlock()
	if !q.closed {
		q.acks <- seq
	}
}

// Changed is poked when messages were added.
func (q *Queue) Changed() <-chan struct{} { return q.changed }

// Len is how many messages and bytes wait.
func (q *Queue) Len() (int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count, q.bytes
}

// Dropped is how many messages drop_oldest dropped since the queue was opened.
func (q *Queue) Dropped() int64 { return q.dropped.Load() }

// Read returns up to max waiting messages with a Seq above after, oldest first,
// skipping those acknowledged.
func (q *Queue) Read(after uint64, max int) ([]Message, error) {
	var out []Message
	err := q.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < max; k, v = c.Next() {
			m, err := decodeMessage(k, v)
			if err != nil {
				return err
			}
			q.mu.Lock()
			skip := q.deleting[m.Seq]
			q.mu.Unlock()
			if !skip {
				out = append(out, m)
			}
		}
		return nil
	})
	return out, err
}

// writer commits waiting puts and acknowledgements together, as many as are waiting.
func (q *Queue) writer() {
	defer q.wg.Done()
	for {
		select {
		case r := <-q.reqs:
			q.commitWaiting([]*putReq{r}, nil)
		case s := <-q.acks:
			q.commitWaiting(nil, []uint64{s})
		case <-q.done:
			// What was handed over before Close; bounded, in case commits keep failing.
			for i := 0; i < 100 && q.commitWaiting(nil, nil); i++ {
			}
			return
		}
	}
}

// commitWaiting commits puts and acks with whatever else is waiting; it reports whether
// there was anything.
func (q *Queue) commitWaiting(puts []*putReq, acks []uint64) bool {
collect:
	for len(puts) < 4096 {
		select {
		case r := <-q.reqs:
			puts = append(puts, r)
		case s := <-q.acks:
			acks = append(acks, s)
		default:
			break collect
		}
	}
	if len(puts) == 0 && len(acks) == 0 {
		return false
	}
	q.commit(puts, acks)
	return true
}

func (q *Queue) commit(puts []*putReq, acks []uint64) {
	results := make([]error, len(puts))
	var freedN int
	var freedB int64
	var addedN, droppedN int
	var addedB int64
	err := q.db.Update(func(tx *bbolt.Tx) error {
		freedN, freedB, addedN, addedB, droppedN = 0, 0, 0, 0, 0
		b := tx.Bucket(bucket)
		for _, s := range acks {
			k := seqKey(s)
			if v := b.Get(k); v != nil {
				if m, err := decodeMessage(k, v); err == nil {
					freedB += m.size()
				}
				freedN++
				if err := b.Delete(k); err != nil {
					return err
				}
			}
		}
		q.mu.Lock()
		count, size := q.count-freedN, q.bytes-freedB
		q.mu.Unlock()
		for i, r := range puts {
			results[i] = nil
			sz := r.m.size()
			for count+1 > q.cfg.MaxMessages || size+sz > int64(q.cfg.MaxBytes) {
				if q.cfg.Overflow != OverflowDropOldest {
					results[i] = ErrFull
					break
				}
				k, v := b.Cursor().First()
				if k == nil {
					results[i] = fmt.Errorf("mqtt bridge: a message of %d bytes is larger than the queue", sz)
					break
				}
				if m, err := decodeMessage(k, v); err == nil {
					size -= m.size()
					freedB += m.size()
				}
				count--
				freedN++
				droppedN++
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			if results[i] != nil {
				continue
			}
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			r.m.Seq = seq
			if err := b.Put(seqKey(seq), encodeMessage(r.m)); err != nil {
				return err
			}
			count++
			size += sz
			addedN++
			addedB += sz
		}
		return nil
	})
	q.mu.Lock()
	if err == nil {
		q.count += addedN - freedN
		q.bytes += addedB - freedB
		for _, s := range acks {
			delete(q.deleting, s)
		}
	}
	q.mu.Unlock()
	if err != nil {
		// Nothing committed: the acknowledged messages stay marked (not sent again in
		// this run) and are deleted by a later commit.
		for _, s := range acks {
			select {
			case q.acks <- s:
			default:
			}
		}
	} else {
		q.dropped.Add(int64(droppedN))
	}
	for i, r := range puts {
		if err != nil {
			r.done <- fmt.Errorf("mqtt bridge: queue: %w", err)
		} else {
			r.done <- results[i]
		}
	}
	if err == nil && addedN > 0 {
		select {
		case q.changed <- struct{}{}:
		default:
		}
	}
}

func seqKey(s uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], s)
	return k[:]
}

// A record: format byte (1), QoS, flags (bit 0: retain), topic length (uint16), topic,
// payload.
const recordFormat = 1

func encodeMessage(m Message) []byte {
	v := make([]byte, 0, 5+len(m.Topic)+len(m.Payload))
	flags := byte(0)
	if m.Retain {
		flags = 1
	}
	v = append(v, recordFormat, m.QoS, flags)
	v = binary.BigEndian.AppendUint16(v, uint16(len(m.Topic)))
	v = append(v, m.Topic...)
	return append(v, m.Payload...)
}

// decodeMessage reads a record; the result owns its memory (bbolt's is only valid in
// its transaction).
func decodeMessage(k, v []byte) (Message, error) {
	if len(k) != 8 || len(v) < 5 || v[0] != recordFormat || v[1] > 2 {
		return Message{}, fmt.Errorf("mqtt bridge: queue record %x: unknown format", k)
	}
	n := int(binary.BigEndian.Uint16(v[3:5]))
	if len(v) < 5+n {
		return Message{}, fmt.Errorf("mqtt bridge: queue record %x: truncated", k)
	}
	return Message{
		Seq:     binary.BigEndian.Uint64(k),
		QoS:     v[1],
		Retain:  v[2]&1 != 0,
		Topic:   string(v[5 : 5+n]),
		Payload: append([]byte(nil), v[5+n:]...),
	}, nil
}
