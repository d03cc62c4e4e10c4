package demo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/hub"
	"github.com/iotsafe/iotsafe/internal/mqttclient"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// MQTTProfile is the profile of the demo device whose MQTT goes over its SSH session: a
// direct alias "broker" to the hub's plain MQTT listener.
const MQTTProfile = "demo-mqtt"

// mqttVia says which demo devices publish over MQTT: tlsDevice over TLS, sshDevice over
// its SSH session through its agent's local forward (empty: no MQTT demo).
type mqttVia struct{ tlsDevice, sshDevice, forward string }

// putMQTTProfile writes MQTTProfile for the broker's plain listener at addr.
func putMQTTProfile(ctx context.Context, reg *registry.Registry, addr string) error {
	p := profile.Default()
	p.Name, p.Direct = MQTTProfile, map[string]string{"broker": addr}
	return reg.PutProfile(ctx, p)
}

// mqttDemo publishes one reading from tlsDevice over MQTT/TLS (its name and a fresh
// telemetry secret) and one from sshDevice over its SSH session (the agent's local
// forward at viaSSH, no credential: the hub knows it by its pool address), then reads
// both back over the REST API as the demo account, as any platform app would.
func mqttDemo(ctx context.Context, h *hub.Hub, o Options, api, frontAddr string, acct *registry.Account, appToken string, caPEM []byte, tlsDevice, sshDevice, viaSSH string) error {
	secret, hash, err := credential.NewToken()
	if err != nil {
		return err
	}
	changes := []control.Change{control.SetDeviceSecret{Device: tlsDevice, Hash: hash}}
	for _, d := range []string{tlsDevice, sshDevice} {
		changes = append(changes, control.AddGrant{Grant: registry.Grant{Kind: registry.PrincipalAccount, Name: acct.Name, Target: d, Alias: registry.RightTelemetry}})
	}
	if err := apply(ctx, h, changes...); err != nil {
		return err
	}
	domain := o.Config.Frontdoor.Domain
	tlsAddr := h.Listener("mqtt_tls").String()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	publish := func(dial func() (net.Conn, error), device string, pw []byte, celsius float64) error {
		nc, err := dial()
		if err != nil {
			return err
		}
		c := mqttclient.New(nc, 5, 1<<20)
		defer c.Close()
		if _, err := c.Connect(mqttclient.Options{ClientID: device, Username: device, Password: pw, Clean: true, Keepalive: 30 * time.Second}, 10*time.Second); err != nil {
			return err
		}
		payload := fmt.Sprintf(`{"celsius":%g}`, celsius)
		return c.Publish("devices/"+device+"/notifications/temperature", []byte(payload), 1, 1, 10*time.Second)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	err = publish(func() (net.Conn, error) {
		return tls.DialWithDialer(dialer, "tcp", tlsAddr, &tls.Config{RootCAs: pool, ServerName: "mqtt." + domain, NextProtos: []string{"mqtt"}, MinVersion: tls.VersionTLS12})
	}, tlsDevice, []byte(secret), 19.5)
	if err != nil {
		return fmt.Errorf("demo: %s's MQTT over TLS: %w", tlsDevice, err)
	}
	fmt.Fprintf(o.Out, "\nMQTT over TLS   %s -> mqtt.%s (%s): devices/%s/notifications/temperature {\"celsius\":19.5}, QoS 1, acknowledged\n", tlsDevice, domain, tlsAddr, tlsDevice)
	err = publish(func() (net.Conn, error) { return dialer.DialContext(ctx, "tcp", viaSSH) }, sshDevice, nil, 20.5)
	if err != nil {
		return fmt.Errorf("demo: %s's MQTT over its SSH session: %w", sshDevice, err)
	}
	fmt.Fprintf(o.Out, "MQTT over SSH   %s -> its agent's forward %s -> the hub's plain broker: devices/%s/notifications/temperature {\"celsius\":20.5}, QoS 1, acknowledged\n", sshDevice, viaSSH, sshDevice)
	for _, d := range []string{tlsDevice, sshDevice} {
		code, body, err := httpsCall(ctx, frontAddr, http.MethodGet, api+"/device/"+d+"/notification?sortOrder=DESC&take=1", "Bearer "+appToken, "", caPEM)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("demo: reading %s's notifications: %d %s %v", d, code, body, err)
		}
		var list []struct {
			Notification string          `json:"notification"`
			Parameters   json.RawMessage `json:"parameters"`
		}
		json.Unmarshal([]byte(body), &list)
		if len(list) == 0 {
			return fmt.Errorf("demo: %s's MQTT reading was not stored", d)
		}
		fmt.Fprintf(o.Out, "GET  %s/device/%s/notification as account %s -> %s %s\n", api, d, acct.Name, list[0].Notification, list[0].Parameters)
	}
	fmt.Fprintf(o.Out, `Devices publish over MQTT (docs/mqtt.md): over TLS with their name and secret, or over their SSH session with nothing:
  mosquitto_pub -h 127.0.0.1 -p %[4]s --cafile iotsafe-ca.crt --insecure -u %[3]s -P "$(cat %[3]s.secret)" -t devices/%[3]s/notifications/hello -m '{"x":1}' -q 1     # %[3]s.secret from above; --insecure: the certificate names *.%[8]s, not 127.0.0.1
  mosquitto_pub -h %[5]s -p %[6]s -t devices/%[7]s/notifications/hello -m '{"x":2}' -q 1     # through %[7]s's agent
  %[1]s
`, o.cli("mqtt status"), "", tlsDevice, portOf(tlsAddr), hostOf(viaSSH), portOf(viaSSH), sshDevice, domain)
	return nil
}

func portOf(hostport string) string { _, p, _ := net.SplitHostPort(hostport); return p }
func hostOf(hostport string) string { h, _, _ := net.SplitHostPort(hostport); return h }
