package kexinit

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// packet builds an unencrypted KEXINIT packet of the lists given.
func packet(lists ...string) []byte {
	payload := append([]byte{20}, make([]byte, 16)...)
	for i := range 10 {
		s := ""
		if i < len(lists) {
			s = lists[i]
		}
		payload = binary.BigEndian.AppendUint32(payload, uint32(len(s)))
		payload = append(payload, s...)
	}
	payload = append(payload, 0, 0, 0, 0, 0)
	pad := 8 - (len(payload)+5)%8 + 4
	pkt := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+pad+1))
	pkt = append(pkt, byte(pad))
	pkt = append(pkt, payload...)
	return append(pkt, make([]byte, pad)...)
}

func TestParse(t *testing.T) {
	o, err := Parse(bytes.NewReader(packet("curve25519-sha256,ext-info-c,kex-strict-c-v00@openssh.com", "ssh-ed25519",
		"aes256-gcm@openssh.com", "aes256-gcm@openssh.com", "hmac-sha2-256", "hmac-sha2-256", "none")))
	if err != nil {
		t.Fatal(err)
	}
	if got := o.KexAlgorithms(); len(got) != 1 || got[0] != "curve25519-sha256" || len(o.Kex) != 3 {
		t.Fatalf("kex: %v (all %v)", got, o.Kex)
	}
	if o.CiphersC2S[0] != "aes256-gcm@openssh.com" || o.HostKeys[0] != "ssh-ed25519" || o.Compression[0] != "none" {
		t.Fatalf("%+v", o)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 12, 4, 20}, {0xff, 0xff, 0xff, 0xff, 0}, packet()[:30]} {
		if _, err := Parse(bytes.NewReader(bad)); err == nil {
			t.Errorf("%x parsed", bad)
		}
	}
}

// The recorder keeps what the stock OpenSSH client offers when it connects, and only
// that: here, ssh restricted to one key exchange and one cipher.
func TestRecorderWithStockOpenSSH(t *testing.T) {
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatal("ssh is needed (scripts/setup.sh installs openssh-client)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	cmd := exec.Command(ssh, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "KexAlgorithms=curve25519-sha256", "-o", "Ciphers=aes256-gcm@openssh.com", "-o", "ConnectTimeout=20", "-p", port, "dev@127.0.0.1")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write([]byte("SSH-2.0-test\r\n"))
	r := Record(c)
	buf := make([]byte, 512)
	for !r.done {
		if _, err := r.Read(buf); err != nil {
			t.Fatalf("reading the client's KEXINIT: %v", err)
		}
	}
	o := r.Offer()
	if o == nil {
		t.Fatal("no offer recorded")
	}
	if k := o.KexAlgorithms(); strings.Join(k, ",") != "curve25519-sha256" {
		t.Errorf("kex offered: %v", k)
	}
	if strings.Join(o.CiphersC2S, ",") != "aes256-gcm@openssh.com" {
		t.Errorf("ciphers offered: %v", o.CiphersC2S)
	}
	if r.buf != nil {
		t.Error("the copy was kept after Offer")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(packet("curve25519-sha256", "ssh-ed25519", "aes128-ctr", "aes128-ctr", "hmac-sha2-256", "hmac-sha2-256", "none", "none"))
	f.Add([]byte{0, 0, 0, 12, 4, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := Parse(bytes.NewReader(b))
		if err == nil && o == nil {
			t.Fatal("no KEXINIT and no error")
		}
		// The recorder, fed the same bytes after an identification line, agrees.
		r := &Recorder{buf: append([]byte("SSH-2.0-x\r\n"), b...)}
		if ro := r.Offer(); (ro == nil) != (err != nil) {
			t.Fatalf("recorder %v, parse %v", ro, err)
		}
	})
}
