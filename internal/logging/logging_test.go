package logging

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// Written to the journal, each line starts with its priority, derived loggers included;
// text lines leave the time to the journal, JSON lines keep it.
func TestJournalPriorities(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(Config{Level: "debug", Journal: true}, &buf)
	log.Debug("probe")
	log.Info("session up", "device", "dev1")
	sub := log.With("component", "sshd").WithGroup("g")
	sub.Warn("violation", "kind", "forward")
	sub.Error("registry cannot write")
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"<7>level=DEBUG msg=probe",
		"<6>level=INFO msg=\"session up\" device=dev1",
		"<4>level=WARN msg=violation component=sshd g.kind=forward",
		"<3>level=ERROR msg=\"registry cannot write\" component=sshd",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}

	buf.Reset()
	log, _ = New(Config{Format: "json", Journal: true}, &buf)
	log.Warn("x")
	if s := buf.String(); !strings.HasPrefix(s, `<4>{"time":`) {
		t.Fatalf("json: %q", s)
	}
}

// Outside the journal nothing changes.
func TestNoJournalNoPrefix(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(Config{}, &buf)
	log.Error("x")
	if s := buf.String(); !strings.HasPrefix(s, "time=") {
		t.Fatalf("got %q", s)
	}
}

// Loggers used from many goroutines keep each line's priority with its line.
func TestJournalConcurrent(t *testing.T) {
	var buf syncBuffer
	log, _ := New(Config{Journal: true}, &buf)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if i%2 == 0 {
					log.Error("bad")
				} else {
					log.Info("good")
				}
			}
		}(i)
	}
	wg.Wait()
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l != "<3>level=ERROR msg=bad" && l != "<6>level=INFO msg=good" {
			t.Fatalf("line %q", l)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
