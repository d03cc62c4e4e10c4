package sshd

// Metrics receives the server's counters. The hub plugs in Prometheus; tests use nil.
type Metrics interface {
	Handshake(ok bool)
	SessionOpened(device string)
	SessionClosed(device string)
	ForwardOpened()
	ForwardClosed()
	ChannelOpened(kind string)
	ChannelClosed(kind string)
	// Bytes counts payload carried for a device: up is device to hub, down is hub to device.
	Bytes(up, down int64)
	Violation(device string)
	// Throttled counts connections that waited for their source's turn to handshake
	// (dropped false) or were dropped for it (dropped true).
	Throttled(dropped bool)
	// HostKeyAnnounced counts announcements of the hub's host keys (a rotation);
	// HostKeyProof counts the proofs devices asked for, answered or refused.
	HostKeyAnnounced()
	HostKeyProof(answered bool)
}

type nopMetrics struct{}

func (nopMetrics) Handshake(bool)       {}
func (nopMetrics) SessionOpened(string) {}
func (nopMetrics) SessionClosed(string) {}
func (nopMetrics) ForwardOpened()       {}
func (nopMetrics) ForwardClosed()       {}
func (nopMetrics) ChannelOpened(string) {}
func (nopMetrics) ChannelClosed(string) {}
func (nopMetrics) Bytes(int64, int64)   {}
func (nopMetrics) Violation(string)     {}
func (nopMetrics) Throttled(bool)       {}
func (nopMetrics) HostKeyAnnounced()    {}
func (nopMetrics) HostKeyProof(bool)    {}
