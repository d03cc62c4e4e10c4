package e2e

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An idle MQTT client over TLS has no goroutine on the hub: it waits in the poller
// (package netready) and is woken by its input, its keepalive deadline or the end of
// its session (issue 54's memory per connection). What a client sees must not change:
// a client that pings after being idle is answered; a silent client is ended at its
// keepalive deadline (one and a half keepalives) and its will is published; an idle
// client whose client id logs in again reads DISCONNECT 0x8E (session taken over) and
// the end of the stream, with no keepalive to end it otherwise. Every client's session
// ends on the hub too (`mqtt status` counts no client after each case): a client that
// is woken by nothing would stay counted.
func TestMQTTIdleClientsAreServedAndEnded(t *testing.T) {
	h := startHub(t, "", "frontdoor: {listen: '127.0.0.1:0', domain: "+fdDomain+"}\nmqtt: {tls_listen: '127.0.0.1:0'}\n")
	h.addDevice("dev1")
	secret := strings.TrimSpace(h.mustCLIStdout("device", "secret", "rotate", "dev1"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(ca, []byte(h.mustCLI("frontdoor", "ca")), 0o644)
	// dial logs in with CONNECT and reads CONNACK; a failure guard bounds every read.
	dial := func(connect []byte) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, err := tls.Dial("tcp", h.mqttTLS, &tls.Config{InsecureSkipVerify: true}) // the peer's identity is not what this test checks
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(connect); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		typ, body, err := readMQTTPacket(r)
		if err != nil || typ>>4 != 2 || len(body) < 2 || body[1] != 0 {
			t.Fatalf("CONNACK: %x %x %v", typ, body, err)
		}
		return c, r
	}
	noClients := func() {
		t.Helper()
		poll(t, "every MQTT client's session ended on the hub", func() bool {
			st, err := mqttStatus(t, h)
			return err == nil && st.Clients == 0
		})
	}

	t.Run("pings after idle", func(t *testing.T) {
		c, r := dial(mqtt5Connect("dev1/ping", "dev1", secret, 0, "", ""))
		for range 3 {
			if _, err := c.Write([]byte{0xC0, 0}); err != nil {
				t.Fatal(err)
			}
			if typ, _, err := readMQTTPacket(r); err != nil || typ != 0xD0 {
				t.Fatalf("after PINGREQ: %x %v, want PINGRESP", typ, err)
			}
		}
		c.Close() // the hang-up wakes it: its session ends
		noClients()
	})

	t.Run("silent past keepalive", func(t *testing.T) {
		sub, subExited := startSub(t, "-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", "dev1", "-P", secret, "-V", "mqttv5",
			"-i", "dev1/sub", "-t", "devices/dev1/notifications/will", "-v", "-d", "-C", "1")
		sub.waitText(t, "received SUBACK")
		_, r := dial(mqtt5Connect("dev1/silent", "dev1", secret, 1, "devices/dev1/notifications/will", `{"gone":true}`))
		// The hub ends the connection at the deadline; the client never sent a byte more.
		for {
			if _, _, err := readMQTTPacket(r); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("the hub did not end a client silent past its keepalive")
				}
				break
			}
		}
		sub.waitText(t, `devices/dev1/notifications/will {"gone":true}`)
		<-subExited // -C 1: it logs out after the will
		noClients()
	})

	t.Run("taken over", func(t *testing.T) {
		_, r := dial(mqtt5Connect("dev1/a", "dev1", secret, 0, "", ""))
		if out, err := mosq(t, "mosquitto_pub", "-h", "127.0.0.1", "-p", portOf(h.mqttTLS), "--cafile", ca, "--insecure", "-u", "dev1", "-P", secret,
			"-V", "mqttv5", "-i", "dev1/a", "-t", "devices/dev1/notifications/t", "-m", "{}"); err != nil {
			t.Fatalf("the second login of dev1/a: %v\n%s", err, out)
		}
		typ, body, err := readMQTTPacket(r)
		if err != nil || typ>>4 != 14 || len(body) == 0 || body[0] != 0x8E {
			t.Fatalf("the idle client taken over read %x %x %v, want DISCONNECT 0x8E", typ, body, err)
		}
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("after the DISCONNECT: %v, want the end of the stream", err)
		}
		noClients()
	})
}
