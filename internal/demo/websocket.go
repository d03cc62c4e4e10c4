package demo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/gorilla/websocket"
)

// wsSubscription is the demo account's socket on DeviceHive's WebSocket API, subscribed
// to dev1's notifications.
type wsSubscription struct {
	conn *websocket.Conn
	url  string
}

// subscribeOverWebSocket opens the socket, authenticates it with the account's token
// and subscribes to dev1's notifications.
func subscribeOverWebSocket(ctx context.Context, addr, domain, port, token string, caPEM []byte) (*wsSubscription, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: pool}, HandshakeTimeout: 10 * time.Second,
		NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	url := fmt.Sprintf("wss://%s:%s/api/websocket", domain, port)
	conn, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("demo: the WebSocket API: %w", err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for _, m := range []map[string]any{
		{"action": "authenticate", "requestId": "1", "token": token},
		{"action": "notification/subscribe", "requestId": "2", "deviceId": "dev1"},
	} {
		var a struct{ Status, Error string }
		if err := conn.WriteJSON(m); err != nil || conn.ReadJSON(&a) != nil || a.Status != "success" {
			conn.Close()
			return nil, fmt.Errorf("demo: the WebSocket API's %s: %s %v", m["action"], a.Error, err)
		}
	}
	return &wsSubscription{conn: conn, url: url}, nil
}

// next is the next push, as it came.
func (s *wsSubscription) next() (string, error) {
	defer s.conn.Close()
	_, b, err := s.conn.ReadMessage()
	if err != nil {
		return "", fmt.Errorf("demo: waiting for the push: %w", err)
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m["action"] != "notification/insert" {
		return "", fmt.Errorf("demo: an unexpected push: %s", b)
	}
	return string(b), nil
}
