package lab

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listenerOwner says whether the socket listening on addr (in this network namespace)
// belongs to process pid or one of its descendants. A lab server is given a port that
// was free a moment ago; if something else took it first (a demo's app, another run),
// the server fails to bind while a connection to addr still succeeds, and the lab would
// measure a process it did not start. known is false when the kernel's tables cannot be
// read (then nobody can tell).
func listenerOwner(pid int, addr string) (owned, known bool) {
	inodes, err := listeningInodes(addr)
	if err != nil || len(inodes) == 0 {
		return false, false
	}
	for _, p := range processTree(pid) {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, _ := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", p), fd.Name()))
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				return true, true
			}
		}
	}
	return false, true
}

// listeningInodes are the inodes of the TCP sockets listening on addr's port at addr's
// address or a wildcard one.
func listeningInodes(addr string) (map[string]bool, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	want, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	out := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "0A" { // 0A: LISTEN
				continue
			}
			lip, lport, ok := parseProcAddr(fl[1])
			if ok && lport == want && (lip.IsUnspecified() || ip == nil || lip.Equal(ip)) {
				out[fl[9]] = true
			}
		}
		f.Close()
	}
	return out, nil
}

// parseProcAddr reads /proc/net/tcp's "0100007F:1F90": the address in the kernel's
// byte order, 32 bits at a time, then the port in hex.
func parseProcAddr(s string) (net.IP, int, bool) {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || (len(h) != 8 && len(h) != 32) {
		return nil, 0, false
	}
	ip := make(net.IP, len(h)/2)
	for w := 0; w < len(h)/8; w++ {
		v, err := strconv.ParseUint(h[w*8:w*8+8], 16, 32)
		if err != nil {
			return nil, 0, false
		}
		// Little-endian words on the machines the lab runs on (amd64, arm64).
		ip[w*4], ip[w*4+1], ip[w*4+2], ip[w*4+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	return ip, int(port), true
}

// processTree is pid and every process below it.
func processTree(pid int) []int {
	parent := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if f := strings.Fields(rest); len(f) >= 2 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				parent[pp] = append(parent[pp], p)
			}
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, parent[out[i]]...)
	}
	return out
}
