package access

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// GroupMembers lists the uids whose primary group is gid or who are listed as members of
// it, from /etc/passwd and /etc/group. The kernel sees only a socket's primary gid, so the
// kernel layer permits a group's members by uid as well. Users known only to a network
// directory (LDAP, ...) reach a group's devices through their primary group alone.
func GroupMembers(gid uint32) []uint32 {
	return groupMembers("/etc/passwd", "/etc/group", gid)
}

func groupMembers(passwd, group string, gid uint32) []uint32 {
	byName := map[string]uint32{}
	var out []uint32
	seen := map[uint32]bool{}
	add := func(uid uint32) {
		if !seen[uid] {
			seen[uid] = true
			out = append(out, uid)
		}
	}
	eachLine(passwd, func(f []string) {
		if len(f) < 4 {
			return
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		g, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		byName[f[0]] = uint32(uid)
		if uint32(g) == gid {
			add(uint32(uid))
		}
	})
	eachLine(group, func(f []string) {
		if len(f) < 4 {
			return
		}
		if g, err := strconv.ParseUint(f[2], 10, 32); err != nil || uint32(g) != gid {
			return
		}
		for _, name := range strings.Split(f[3], ",") {
			if uid, ok := byName[strings.TrimSpace(name)]; ok {
				add(uid)
			}
		}
	})
	return out
}

func eachLine(path string, fn func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			fn(strings.Split(line, ":"))
		}
	}
}
