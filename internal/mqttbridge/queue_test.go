package mqttbridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func openTestQueue(t *testing.T, path string, cfg QueueConfig) *Queue {
	t.Helper()
	if cfg.Overflow == "" {
		cfg.Overflow = OverflowRefuse
	}
	q, err := OpenQueue(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func put(t *testing.T, q *Queue, topic string) error {
	t.Helper()
	return q.Put(context.Background(), Message{Topic: topic, Payload: []byte("p-" + topic), QoS: 1})
}

func topics(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Topic)
	}
	return out
}

// The queue keeps messages in order on disk, across a reopening, until acknowledged;
// an acknowledged message is not read again, and the file is the owner's only.
func TestQueueOrderAckAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), QueueFile)
	q := openTestQueue(t, path, QueueConfig{MaxMessages: 100, MaxBytes: 1 << 20})
	for i := range 5 {
		if err := put(t, q, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Read(0, 10)
	if err != nil || fmt.Sprint(topics(ms)) != "[t0 t1 t2 t3 t4]" {
		t.Fatalf("read %v %v", topics(ms), err)
	}
	if string(ms[2].Payload) != "p-t2" || ms[2].QoS != 1 {
		t.Fatalf("message %+v", ms[2])
	}
	q.Ack(ms[0].Seq)
	q.Ack(ms[2].Seq)
	after, _ := q.Read(0, 10)
	if fmt.Sprint(topics(after)) != "[t1 t3 t4]" {
		t.Fatalf("after acks: %v", topics(after))
	}
	if part, _ := q.Read(ms[3].Seq, 10); fmt.Sprint(topics(part)) != "[t4]" {
		t.Fatalf("read after t3: %v", topics(part))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("queue file mode: %v %v", fi.Mode(), err)
	}
	q = openTestQueue(t, path, QueueConfig{MaxMessages: 100, MaxBytes: 1 << 20})
	defer q.Close()
	again, _ := q.Read(0, 10)
	if fmt.Sprint(topics(again)) != "[t1 t3 t4]" {
		t.Fatalf("after reopening: %v", topics(again))
	}
	if n, _ := q.Len(); n != 3 {
		t.Fatalf("Len = %d", n)
	}
	// New messages come after the old ones.
	put(t, q, "t5")
	if all, _ := q.Read(0, 10); fmt.Sprint(topics(all)) != "[t1 t3 t4 t5]" {
		t.Fatalf("after a new put: %v", topics(all))
	}
}

// A full queue refuses (the default) or drops its oldest message, counted.
func TestQueueOverflow(t *testing.T) {
	q := openTestQueue(t, filepath.Join(t.TempDir(), QueueFile), QueueConfig{MaxMessages: 3, MaxBytes: 1 << 20})
	for i := range 3 {
		put(t, q, fmt.Sprint("t", i))
	}
	if err := put(t, q, "t3"); !errors.Is(err, ErrFull) {
		t.Fatalf("fourth message: %v, want ErrFull", err)
	}
	ms, _ := q.Read(0, 1)
	q.Ack(ms[0].Seq)
	// The acknowledgement is committed with the next put, which then fits.
	if err := put(t, q, "t3"); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
	q.Close()

	d := openTestQueue(t, filepath.Join(t.TempDir(), QueueFile), QueueConfig{MaxMessages: 3, MaxBytes: 1 << 20, Overflow: OverflowDropOldest})
	defer d.Close()
	for i := range 5 {
		if err := put(t, d, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if all, _ := d.Read(0, 10); fmt.Sprint(topics(all)) != "[t2 t3 t4]" || d.Dropped() != 2 {
		t.Fatalf("drop_oldest: %v, dropped %d", topics(all), d.Dropped())
	}
	// A message larger than the whole queue is refused even so.
	big := QueueConfig{MaxMessages: 3, MaxBytes: 16, Overflow: OverflowDropOldest}
	b := openTestQueue(t, filepath.Join(t.TempDir(), QueueFile), big)
	defer b.Close()
	if err := b.Put(context.Background(), Message{Topic: "t", Payload: make([]byte, 64), QoS: 1}); err == nil {
		t.Fatal("a message larger than the queue was taken")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add(seqKey(1), encodeMessage(Message{Topic: "a/b", Payload: []byte("x"), QoS: 1, Retain: true}))
	f.Add(seqKey(2), []byte{1, 1, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, k, v []byte) {
		m, err := decodeMessage(k, v)
		if err != nil {
			return
		}
		back := encodeMessage(m)
		if string(back) != string(v[:len(back)]) && v[2]&^1 == 0 {
			t.Fatalf("re-encoding %x gave %x", v, back)
		}
	})
}
