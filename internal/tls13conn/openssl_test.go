package tls13conn

import (
	"bufio"
	"net"
	"os/exec"
	"strings"
	"testing"
)

// The stock openssl s_client, a real peer: it connects, reads a line, asks for a key
// update both ways ("K"), and its next line comes back through the new keys.
func TestOpenSSLClientKeyUpdate(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed (scripts/setup.sh installs it)")
	}
	p := newPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := NewServer(serverConfig(p))
	served := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		c, err := srv.Handshake(raw)
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		if _, ok := c.(*Conn); !ok {
			served <- errNotCarried
			return
		}
		c.Write([]byte("hello\n"))
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				served <- err
				return
			}
			if _, err := c.Write([]byte("echo " + line)); err != nil {
				served <- err
				return
			}
			if strings.HasPrefix(line, "bye") {
				served <- nil
				return
			}
		}
	}()
	// Neither -quiet nor -ign_eof: either turns s_client's commands off.
	cmd := exec.Command(bin, "s_client", "-connect", ln.Addr().String(), "-tls1_3", "-servername", "hub.test")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	// s_client notes a command on stderr; it reads stdin a chunk at a time and a command
	// takes its whole chunk, so the next line is sent once the note is seen.
	stderr, _ := cmd.StderrPipe()
	notes := make(chan string, 100)
	go func() {
		r := bufio.NewReader(stderr)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(notes)
				return
			}
			notes <- line
		}
	}()
	noted := func(want string) {
		t.Helper()
		for line := range notes {
			if strings.TrimSpace(line) == want {
				return
			}
		}
		t.Fatalf("s_client ended before noting %s", want)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	// s_client prints the session and its commands' notes between the data lines.
	expect := func(want string) {
		t.Helper()
		var seen []string
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("s_client ended (%v) before printing %q; printed:\n%s", err, want, strings.Join(seen, ""))
			}
			if strings.TrimSpace(line) == want {
				return
			}
			if strings.HasPrefix(line, "echo ") {
				t.Fatalf("s_client printed %q before %q (a command sent as data?)", line, want)
			}
			seen = append(seen, line)
		}
	}
	expect("hello")
	stdin.Write([]byte("one\n"))
	expect("echo one")
	stdin.Write([]byte("K\n")) // s_client: KeyUpdate, update_requested
	noted("KEYUPDATE")
	stdin.Write([]byte("two\n"))
	expect("echo two")
	stdin.Write([]byte("k\n")) // KeyUpdate, update_not_requested
	noted("KEYUPDATE")
	stdin.Write([]byte("bye\n"))
	expect("echo bye")
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	for range notes {
	}
	cmd.Wait()
}

var errNotCarried = errorString("TLS 1.3 stayed with crypto/tls")

type errorString string

func (e errorString) Error() string { return string(e) }
