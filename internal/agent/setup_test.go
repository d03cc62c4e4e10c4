package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshtest"
)

// A hub that accepts the handshake and then never answers the session's setup does not
// hold the agent: the session is closed after the handshake timeout with a clear error,
// and the agent connects again.
func TestStuckHubSetupEndsTheSession(t *testing.T) {
	addr, _, sessions := sshtest.SilentServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	retries := sshtest.NewRetries()
	a, err := New(Config{Hub: addr, Device: "dev1", Signer: sshtest.Signer(t), HostKey: ssh.InsecureIgnoreHostKey(),
		Expose: []Expose{{Alias: "http", Target: "127.0.0.1:1"}},
		// Short, so the test is quick; a handshake that misses it under load is retried.
		HandshakeTimeout: time.Second, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond,
		OnRetry: retries.OnRetry})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	retries.Await(t, ErrSetupTimeout)
	// It connected again after giving up on the stuck session.
	<-sessions
	<-sessions
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}
