package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"

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

// diagSockets keeps bound sock_diag sockets for reuse: a lookup is then one send and one
// receive instead of five system calls. A socket whose exchange failed is closed, not
// returned, so a stray answer can never be read by the next lookup.
var diagSockets = make(chan int, 32)

func getDiagSocket() (int, error) {
	select {
	case fd := <-diagSockets:
		return fd, nil
	default:
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("firewall: sock_diag socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("firewall: sock_diag bind: %w", err)
	}
	return fd, nil
}

func putDiagSocket(fd int) {
	select {
	case diagSockets <- fd:
	default:
		unix.Close(fd)
	}
}

func socketUID(src, dst *net.TCPAddr) (uid uint32, err error) {
	family := uint8(unix.AF_INET)
	if src.IP.To4() == nil || dst.IP.To4() == nil {
		family = unix.AF_INET6
	}
	fd, err := getDiagSocket()
	if err != nil {
		return 0, err
	}
	clean := false // the answer to our request was read completely
	defer func() {
		if clean {
			putDiagSocket(fd)
		} else {
			unix.Close(fd)
		}
	}()

	msg := make([]byte, unix.NLMSG_HDRLEN+reqLen)
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
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("firewall: sock_diag send: %w", err)
	}

	var buf [4096]byte
	for {
		n, _, err := unix.Recvfrom(fd, buf[:], 0)
		if err != nil {
			return 0, fmt.Errorf("firewall: sock_diag receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return 0, fmt.Errorf("firewall: sock_diag parse: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != s {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				clean = true
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						if unix.Errno(-errno) == unix.ENOENT {
							return 0, ErrPeerNotFound
						}
						return 0, fmt.Errorf("firewall: sock_diag: %w", unix.Errno(-errno))
					}
				}
				return 0, ErrPeerNotFound
			case sockDiagByFamily:
				if len(m.Data) < msgUIDOffset+4 {
					return 0, errors.New("firewall: sock_diag: short answer")
				}
				// An exact request gets exactly one answer message: the socket is clean.
				clean = true
				return binary.NativeEndian.Uint32(m.Data[msgUIDOffset:]), nil
			}
		}
	}
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
