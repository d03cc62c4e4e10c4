package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrPeerNotFound means the kernel knows no local socket at the other end: the peer is
// not a process on this host (or has already gone).
var ErrPeerNotFound = errors.New("firewall: peer socket not found on this host")

var seq atomic.Uint32

// PeerUID returns the uid owning the local TCP socket at the other end of c, which must
// be a connection accepted from this host. It sends one exact-match sock_diag request
// (a hash lookup in the kernel, unlike a dump), and needs no privilege.
func PeerUID(c net.Conn) (uint32, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("firewall: not a TCP connection")
	}
	// The peer's socket has our remote address as its source and our local as its destination.
	return socketUID(remote, local)
}

// Layout of struct inet_diag_req_v2 and struct inet_diag_msg (linux/inet_diag.h).
const (
	sockDiagByFamily = 20
	reqLen           = 56
	msgUIDOffset     = 64
	noCookie         = 0xffffffff
)

// diagConn is a bound sock_diag socket with its buffers. Pooled connections make a
// lookup one write and one read, with no allocation.
type diagConn struct {
	fd  int
	req [unix.NLMSG_HDRLEN + reqLen]byte
	// The answer to an exact request is one inet_diag_msg with a few attributes (the
	// kernel sizes its reply from the socket's receive buffer, never beyond 8 KiB here).
	buf [8192]byte
}

// diagSockets keeps sock_diag connections for reuse. One whose exchange failed is closed,
// not returned, so a stray answer can never be read by the next lookup.
var diagSockets = make(chan *diagConn, 32)

func getDiagSocket() (*diagConn, error) {
	select {
	case d := <-diagSockets:
		return d, nil
	default:
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("firewall: sock_diag socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("firewall: sock_diag bind: %w", err)
	}
	return &diagConn{fd: fd}, nil
}

func putDiagSocket(d *diagConn) {
	select {
	case diagSockets <- d:
	default:
		unix.Close(d.fd)
	}
}

func socketUID(src, dst *net.TCPAddr) (uid uint32, err error) {
	family := uint8(unix.AF_INET)
	if src.IP.To4() == nil || dst.IP.To4() == nil {
		family = unix.AF_INET6
	}
	d, err := getDiagSocket()
	if err != nil {
		return 0, err
	}
	clean := false // the answer to our request was read completely
	defer func() {
		if clean {
			putDiagSocket(d)
		} else {
			unix.Close(d.fd)
		}
	}()

	msg := d.req[:]
	clear(msg)
	s := seq.Add(1)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:], s)
	req := msg[unix.NLMSG_HDRLEN:]
	req[0], req[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(req[4:], 0xffffffff) // any state
	id := req[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(src.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(dst.Port))
	putAddr(id[4:20], src.IP, family)
	putAddr(id[20:36], dst.IP, family)
	binary.NativeEndian.PutUint32(id[40:], noCookie)
	binary.NativeEndian.PutUint32(id[44:], noCookie)
	// An unconnected netlink socket sends to the kernel: write needs no address.
	if _, err := unix.Write(d.fd, msg); err != nil {
		return 0, fmt.Errorf("firewall: sock_diag send: %w", err)
	}
	for {
		n, err := unix.Read(d.fd, d.buf[:])
		if err != nil {
			return 0, fmt.Errorf("firewall: sock_diag receive: %w", err)
		}
		uid, done, err := parseDiagAnswer(d.buf[:n], s)
		if done {
			clean = true
		}
		if done || err != nil {
			return uid, err
		}
	}
}

// parseDiagAnswer reads the netlink messages of one datagram and finds the answer to
// request seq: the owner's uid, or ErrPeerNotFound. done is false if the datagram held
// no answer to seq (an earlier request's, which a failed exchange could leave behind).
func parseDiagAnswer(b []byte, seq uint32) (uid uint32, done bool, err error) {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return 0, false, errors.New("firewall: sock_diag: malformed answer")
		}
		typ := binary.NativeEndian.Uint16(b[4:])
		data := b[unix.NLMSG_HDRLEN:l]
		if binary.NativeEndian.Uint32(b[8:]) == seq {
			switch typ {
			case unix.NLMSG_ERROR:
				if len(data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(data)); errno != 0 && unix.Errno(-errno) != unix.ENOENT {
						return 0, true, fmt.Errorf("firewall: sock_diag: %w", unix.Errno(-errno))
					}
				}
				return 0, true, ErrPeerNotFound
			case sockDiagByFamily:
				if len(data) < msgUIDOffset+4 {
					return 0, true, errors.New("firewall: sock_diag: short answer")
				}
				// An exact request gets exactly one answer message: the socket is clean.
				return binary.NativeEndian.Uint32(data[msgUIDOffset:]), true, nil
			}
		}
		// Messages are aligned to 4 bytes.
		l = (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if l >= len(b) {
			break
		}
		b = b[l:]
	}
	return 0, false, nil
}

func putAddr(dst []byte, ip net.IP, family uint8) {
	if family == unix.AF_INET {
		copy(dst, ip.To4())
		return
	}
	copy(dst, ip.To16())
}

// UnixPeerCred returns the kernel's credentials of the process at the other end of a
// Unix socket (SO_PEERCRED): the only identity the hub trusts from local callers.
func UnixPeerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}
