package pgscratch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Server is a running scratch PostgreSQL server.
type Server struct {
	dir    string // scratch folder: data/, the socket, the log
	bin    string // folder of initdb, pg_ctl, postgres
	cred   *syscall.Credential
	next   atomic.Int64
	mu     sync.Mutex
	proc   *exec.Cmd  // the running postmaster
	exited chan error // its exit, from the goroutine that started it
	// durable: fsync and full-page writes as PostgreSQL's defaults (Options).
	durable bool
}

// BinDir finds Debian's PostgreSQL server binaries (the newest major installed), or
// says how to install them.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("the PostgreSQL server is not installed (Debian package postgresql): run scripts/setup.sh")
}

func major(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Options tune a scratch server.
type Options struct {
	// Durable keeps PostgreSQL's own defaults (fsync, full-page writes, 128 MB of
	// shared buffers) for measurements; tests leave it off: a scratch cluster needs no
	// durability, and tests start several servers at once.
	Durable bool
}

// New creates a scratch cluster for tests and starts its server.
func New() (*Server, error) { return NewWith(Options{}) }

// NewWith creates a scratch cluster and starts its server.
func NewWith(o Options) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	removeStale()
	dir, err := os.MkdirTemp("", "iotsafe-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, durable: o.Durable}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgscratch: PostgreSQL will not run as root and there is no user nobody: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// --no-sync, and fsync=off unless durable: a scratch cluster needs no durability, and
	// the machine's disk is shared with every other test.
	if err := s.run("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// removeStale removes the folders of servers whose test binary was killed (its server
// died with it, the folder stayed): older than an hour, with no live postmaster.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "iotsafe-pg-*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || time.Since(fi.ModTime()) < time.Hour {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
			if pid > 0 && syscall.Kill(pid, 0) == nil {
				continue
			}
		}
		os.RemoveAll(d)
	}
}

// Start for tests: a server stopped and removed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// Socket is the folder holding the server's Unix socket.
func (s *Server) Socket() string { return s.dir }

func (s *Server) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgscratch: %s: %v\n%s%s", name, err, out, s.logTail())
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "server log:\n" + string(b)
}

// Start starts the server (again, after Stop) and returns when it accepts connections.
// The server is a child of this process, not a daemon: it gets SIGQUIT (immediate
// shutdown) if the test binary dies, so a killed test leaves no server behind.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("pgscratch: already running")
	}
	args := []string{"-D", s.data(), "-k", s.dir, "-c", "listen_addresses=", "-c", "max_connections=300",
		"-c", "logging_collector=off"}
	if !s.durable {
		// Tests start many servers at once: small buffers, no durability.
		args = append(args, "-c", "shared_buffers=32MB", "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	started, ready, exited := make(chan error, 1), make(chan bool, 1), make(chan error, 1)
	logf, _ := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	go func() {
		// The parent-death signal comes when the *thread* that started the child ends,
		// not the process: any goroutine that locks a thread and exits without
		// unlocking it (a test entering a network namespace) ends that thread. This
		// goroutine keeps its own thread for the server's whole life.
		runtime.LockOSThread()
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		// The server logs to stderr; it is ready when it says so.
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if !said && strings.Contains(sc.Text(), "database system is ready to accept connections") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgscratch: postgres: %w", err)
	}
	if !<-ready {
		<-exited
		return fmt.Errorf("pgscratch: postgres did not start\n%s", s.logTail())
	}
	s.proc, s.exited = cmd, exited
	return nil
}

// PID is the postmaster's process id (its backends are its children), 0 when the
// server is stopped: the lab measures the server's CPU time from it.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Process.Pid
}

// Stop stops the server (fast shutdown: sessions are cut, as when an operator
// restarts it) and waits for it to exit.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	s.proc.Process.Signal(syscall.SIGINT)
	err := <-s.exited
	s.proc = nil
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("pgscratch: postgres stopped with %v\n%s", err, s.logTail())
	}
	return err
}

// Restart stops and starts the server.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Close stops the server and removes its folder.
func (s *Server) Close() {
	_ = s.Stop()
	os.RemoveAll(s.dir)
}

// DSN is the URL of database db on the server.
func (s *Server) DSN(db string) string {
	return "postgres://postgres@/" + db + "?host=" + s.dir + "&sslmode=disable"
}

// CreateDatabase creates a new, empty database and returns its DSN.
func (s *Server) CreateDatabase() (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.next.Add(1))
	cfg, err := pgx.ParseConfig(s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgscratch: create database: %w", err)
	}
	return s.DSN(name), nil
}

// Database is CreateDatabase for tests.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	dsn, err := s.CreateDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Exec runs one statement as the superuser on database db (for tests that need to
// break something on purpose).
func (s *Server) Exec(db, stmt string) error {
	cfg, err := pgx.ParseConfig(s.DSN(db))
	if err != nil {
		return err
	}
	conn := stdlib.OpenDB(*cfg)
	defer conn.Close()
	_, err = conn.ExecContext(context.Background(), stmt)
	return err
}

// shared is the one server of a test binary (Shared, Main).
var shared struct {
	once sync.Once
	s    *Server
	err  error
}

// Shared is a server shared by every test of a package, started at first use; the
// package's TestMain calls Main so it is stopped at the end.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() { shared.s, shared.err = New() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.s
}

// Main runs a package's tests and then stops the shared server, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	CloseShared()
	os.Exit(code)
}

// CloseShared stops the shared server, if one was started (for a TestMain that runs
// its tests more than once).
func CloseShared() {
	if shared.s != nil {
		shared.s.Close()
	}
}
