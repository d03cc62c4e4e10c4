package acceptor

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// Config of one accept loop. The zero value retries errors and caps nothing.
type Config struct {
	// Name is the listener's name in log lines ("resolver", "admin", ...).
	Name string
	// Peer names who a connection belongs to, for PerPeer ("uid 1000", an address); ""
	// or nil means no cap.
	Peer func(net.Conn) string
	// PerPeer is how many connections one peer may hold at once; more are closed at
	// once (and logged once a minute per peer). 0 means no cap.
	PerPeer int
	// Logger; nil discards.
	Logger *slog.Logger
}

// Serve accepts connections from ln and runs handle for each in its own goroutine until
// ln is closed; it returns nil then. Temporary errors never stop it.
func Serve(ln net.Listener, cfg Config, handle func(net.Conn)) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &loop{cfg: cfg, gate: throttle.NewLogGate(time.Minute), held: map[string]int{}}
	reserveOnce.Do(func() { reserve, _ = os.Open(os.DevNull) })
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if delay = next(delay); isOutOfDescriptors(err) {
				l.shed(ln)
			}
			l.warn("accept:"+cfg.Name, "accept failed; retrying", "listener", cfg.Name, "err", err, "retry_in", delay.String())
			time.Sleep(delay)
			continue
		}
		delay = 0
		peer := ""
		if cfg.PerPeer > 0 && cfg.Peer != nil {
			peer = cfg.Peer(c)
		}
		if peer != "" && !l.take(peer) {
			c.Close()
			l.warn("peer:"+cfg.Name+":"+peer, "a peer holds too many connections; closing the new one",
				"listener", cfg.Name, "peer", peer, "limit", cfg.PerPeer)
			continue
		}
		go func() {
			defer l.release(peer)
			defer contain.Recover(cfg.Logger, cfg.Name, c)
			handle(c)
		}()
	}
}

// reserve is one descriptor kept for shedding, shared by every loop of the process (a
// hub has a loop per protected socket: one each would cost a descriptor per device).
var (
	reserveOnce sync.Once
	reserveMu   sync.Mutex
	reserve     *os.File
)

type loop struct {
	cfg  Config
	gate *throttle.LogGate

	mu   sync.Mutex
	held map[string]int
}

func (l *loop) take(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[peer] >= l.cfg.PerPeer {
		return false
	}
	l.held[peer]++
	return true
}

func (l *loop) release(peer string) {
	if peer == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[peer]--; l.held[peer] <= 0 {
		delete(l.held, peer)
	}
}

// shed frees the reserved descriptor to accept the pending connection and close it, so
// its client is told instead of waiting in the backlog, then takes the reserve back.
func (l *loop) shed(ln net.Listener) {
	reserveMu.Lock()
	defer reserveMu.Unlock()
	if reserve == nil {
		reserve, _ = os.Open(os.DevNull) // taken by an earlier shed that could not get it back
		return
	}
	reserve.Close()
	reserve = nil
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(time.Now().Add(time.Millisecond))
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
		d.SetDeadline(time.Time{})
	}
	reserve, _ = os.Open(os.DevNull)
}

func (l *loop) warn(key, msg string, args ...any) {
	if ok, n := l.gate.Allow(key); ok {
		if n > 0 {
			args = append(args, "similar_suppressed", n)
		}
		l.cfg.Logger.Warn(msg, args...)
	}
}

// next is the backoff after an accept error, as net/http's: 5 ms doubling to 1 s.
func next(d time.Duration) time.Duration {
	if d == 0 {
		return 5 * time.Millisecond
	}
	return min(2*d, time.Second)
}

func isOutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
