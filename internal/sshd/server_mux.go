package sshd

import (
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/contain"
	"github.com/iotsafe/iotsafe/internal/sshext"
	"github.com/iotsafe/iotsafe/internal/zmux"
)

// openMux accepts an iotsafe agent's multiplexed channel: one channel that carries
// every forwarded connection of the session, compressed with one deflate context per
// direction if the agent asks and the profile allows it. A refused request is not a
// violation: the agent goes on with plain channels.
func (ss *session) openMux(nc ssh.NewChannel) {
	var req sshext.MuxOpen
	err := ssh.Unmarshal(nc.ExtraData(), &req)
	mode, v2 := sshext.MuxMode(req.Mode)
	if err != nil || (mode != sshext.MuxDeflate && mode != sshext.MuxPlain) {
		ss.reject(nc, ssh.UnknownChannelType, fmt.Sprintf("multiplexed channel: unknown mode %q (this hub knows %q and %q, each optionally with %q)",
			req.Mode, sshext.MuxDeflate, sshext.MuxPlain, sshext.MuxV2), "")
		return
	}
	compress := mode == sshext.MuxDeflate
	if compress && !ss.prof.Compression {
		ss.reject(nc, ssh.Prohibited, fmt.Sprintf("compression is off in profile %q (compression: true allows it)", ss.prof.Name), "")
		return
	}
	if ss.mux.Load() != nil {
		ss.reject(nc, ssh.Prohibited, "one multiplexed channel per session", "second multiplexed channel requested")
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	ss.muxRequests = reqs // refused by the session's loop: no goroutine of its own
	o := zmux.Options{Compress: compress, Version2: v2, Handle: ss.openMuxStream, Ended: ss.muxEnded}
	if req.Coalesce {
		o.FlushDelay = sshext.CoalesceDelay
	}
	m := zmux.New(ch, o)
	if !ss.mux.CompareAndSwap(nil, m) {
		m.Close() // defensive: opens are served one at a time, so only a bug gets here
		return
	}
	ss.algos.Multiplexed = req.Mode
	ss.recordAlgorithms()
	ss.log.Info("multiplexed channel open", "mode", mode, "framing", o.FramingVersion(), "coalesce", req.Coalesce)
}

// muxEnded runs when the multiplexed channel has ended: it logs why, and a device that
// broke the framing loses its session.
func (ss *session) muxEnded(m *zmux.Session) {
	ss.mux.CompareAndSwap(m, nil)
	stats := m.Stats()
	ss.log.Info("multiplexed channel closed", "why", m.Err(), "raw_out", stats.RawOut, "wire_out", stats.WireOut, "raw_in", stats.RawIn, "wire_in", stats.WireIn)
	if err := m.Err(); errors.Is(err, zmux.ErrProtocol) {
		ss.violate("multiplexed channel: " + err.Error())
		ss.close("broken multiplexed channel")
	}
}

// openMuxStream serves a stream the device opens in its multiplexed channel: a direct
// forward, decided exactly as direct-tcpip channels are. It runs on the channel's reader
// and does not block: the dial runs on its own goroutine.
func (ss *session) openMuxStream(st *zmux.Stream) {
	t := st.Target()
	if t.Kind != zmux.Direct {
		msg := "only direct forwards may be opened by the device"
		st.Reset(msg)
		ss.refused("multiplexed channel: " + msg)
		return
	}
	target, err := directTarget(ss.prof, t.Host, t.Port)
	if err != nil {
		st.Reset("iotsafe: " + err.Error())
		ss.refused(err.Error())
		return
	}
	if err := ss.acquireChannel(); err == errHubBudget {
		st.Reset("iotsafe: " + err.Error())
		return
	} else if err != nil {
		st.Reset(fmt.Sprintf("iotsafe: channel limit %d reached", ss.prof.MaxChannels))
		ss.refused(fmt.Sprintf("direct forward %q: over the limit of %d open channels", t.Host, ss.prof.MaxChannels))
		return
	}
	go func() {
		defer contain.Recover(ss.log, "direct forward", st)
		c, err := ss.dialTarget(t.Host, target)
		if err != nil {
			st.Reset("iotsafe: " + err.Error())
			return
		}
		ss.pipe(kindDirect, t.Host, st, c, ss.releaseChannel)
	}()
}
