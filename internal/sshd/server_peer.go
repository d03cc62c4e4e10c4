package sshd

import (
	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/tunnel"
)

// servePeer serves a peer hub's connection (Config.PeerHub) until it ends: each
// PeerChannel is one connection to a device whose session this hub holds, carried as a
// gateway's centre's would be (RelayTo); anything else is refused. The server's Close
// ends it.
func (s *Server) servePeer(name string, conn *ssh.ServerConn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	log := s.log.With("peer_hub", name, "remote", conn.RemoteAddr().String())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	if s.peers == nil {
		s.peers = map[*ssh.ServerConn]bool{}
	}
	s.peers[conn] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.peers, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	log.Info("peer hub connected")
	go ssh.DiscardRequests(reqs) // keepalives get their "no"
	for nc := range chans {
		if nc.ChannelType() != sshext.PeerChannel {
			nc.Reject(ssh.UnknownChannelType, "a peer hub may open "+sshext.PeerChannel+" only")
			continue
		}
		var o sshext.DeviceOpen
		if err := ssh.Unmarshal(nc.ExtraData(), &o); err != nil {
			nc.Reject(ssh.ConnectionFailed, "malformed "+sshext.PeerChannel)
			continue
		}
		decided := false
		err := s.RelayTo(o.Device, o.Alias, o.OriginAddr, o.OriginPort, func() (tunnel.Stream, error) {
			decided = true
			ch, creqs, err := nc.Accept()
			if err != nil {
				return nil, err
			}
			go ssh.DiscardRequests(creqs)
			return ch, nil
		})
		if err != nil && !decided {
			log.Debug("peer connection refused", "device", o.Device, "alias", o.Alias, "err", err)
			nc.Reject(ssh.ConnectionFailed, err.Error())
		}
	}
	log.Info("peer hub disconnected")
}
