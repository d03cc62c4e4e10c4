package sshd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// extJoin marks a connection of sshext.JoinUser: a device enrolling its key.
const extJoin = "iotsafe-join"

// joinAttempts bounds the join commands one source address may run: 10 at once, then
// one every 6 s. A token has 256 random bits, so this is not what keeps one from being
// guessed: it keeps one address from making the hub hash and look up tokens without end.
const (
	joinBurst = 10
	joinRate  = 1.0 / 6
)

// checkJoin admits any key for the join user when the hub takes joins: the token,
// checked once the client proved it holds the key, decides.
func (s *Server) checkJoin(key ssh.PublicKey) (*ssh.Permissions, error) {
	if s.cfg.Join == nil {
		return nil, refuse("this hub takes no join tokens: ask its operator to enrol the device")
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		return nil, refuse("join with the device's plain key, not a certificate (a certificate logs in as the device itself)")
	}
	return &ssh.Permissions{Extensions: map[string]string{extJoin: "1", extKeyType: key.Type(),
		extJoinKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))}}, nil
}

// serveJoin runs a join connection: one session channel, one "join NAME TOKEN" command,
// the answer, and the end. The connection keeps the handshake's deadline throughout.
func (s *Server) serveJoin(c net.Conn, conn *ssh.ServerConn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	defer conn.Close()
	c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	go ssh.DiscardRequests(reqs)
	key := conn.Permissions.Extensions[extJoinKey]
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.Prohibited, "a join connection runs one command: join NAME TOKEN")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		for req := range creqs {
			if req.Type != "exec" {
				req.Reply(false, nil) // no pty, shell, env or subsystem
				continue
			}
			var cmd struct{ Command string }
			ssh.Unmarshal(req.Payload, &cmd)
			req.Reply(true, nil)
			out, status := s.join(cmd.Command, key, conn.RemoteAddr().String())
			if status == 0 {
				ch.Write(out)
			} else {
				ch.Stderr().Write(out)
			}
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
			ch.Close()
			return
		}
		return
	}
}

// extJoinKey carries the join connection's key (authorized_keys form) from the handshake.
const extJoinKey = "iotsafe-join-key"

// join runs one join command; the answer is the JSON for the device (status 0) or the
// refusal to show it (status 1).
func (s *Server) join(command, key, remote string) ([]byte, uint32) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	fields := strings.Fields(command)
	if len(fields) != 3 || fields[0] != "join" {
		return []byte("iotsafe: a join connection runs one command: join NAME TOKEN\n"), 1
	}
	name, token := fields[1], fields[2]
	if wait, ok := s.joins.Take(host, 1, time.Now()); !ok {
		s.log.Warn("join refused: too many attempts from one address", "remote", remote)
		return fmt.Appendf(nil, "iotsafe: too many join attempts from %s: retry in %s\n", host, wait.Round(time.Second)), 1
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return []byte("iotsafe: the connection's key is unreadable\n"), 1
	}
	ctx, cancel := context.WithTimeout(s.life, s.cfg.HandshakeTimeout)
	defer cancel()
	prof, pending, err := s.cfg.Join(ctx, token, name, pub, remote)
	if err != nil {
		why := strings.TrimPrefix(err.Error(), "registry: ")
		if !errors.Is(err, registry.ErrJoinRefused) && !errors.Is(err, registry.ErrExists) {
			s.log.Error("join failed", "device", name, "remote", remote, "err", err)
			why = "the hub could not enrol the device now; retry later"
		}
		s.log.Info("join refused", "device", name, "remote", remote, "why", why)
		s.refusedEvent(registry.Event{Device: name, Kind: registry.EventJoinRefused, Detail: why, Remote: remote})
		return []byte("iotsafe: " + why + "\n"), 1
	}
	ans := sshext.JoinAnswer{Device: name, Profile: prof, Pending: pending}
	if set := s.hostKeys.Load(); set != nil {
		for _, k := range set.Announced() {
			ans.HostKeys = append(ans.HostKeys, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
		}
	}
	for _, c := range s.cfg.HostCertificates {
		if line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(c.SignatureKey))); !slices.Contains(ans.HostCAs, line) {
			ans.HostCAs = append(ans.HostCAs, line)
		}
	}
	s.log.Info("device joined with a token", "device", name, "remote", remote, "key", ssh.FingerprintSHA256(pub), "pending_approval", pending)
	b, _ := json.Marshal(ans)
	return append(b, '\n'), 0
}
