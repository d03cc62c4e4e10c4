package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// CallJSON makes one JSON request to a hub's REST API (auth: an Authorization value,
// or "") and decodes a 2xx answer into out (if set); another status is an error with
// DeviceHive's message.
func CallJSON(ctx context.Context, c *http.Client, method, url, auth string, body, out any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, e.Message)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	_, err = io.Copy(io.Discard, resp.Body) // drained: the connection is reused
	return err
}

// UUIDPayload is a notification's parameters of paper 004's lab: a random 36-byte UUID.
func UUIDPayload() json.RawMessage {
	var b [16]byte
	rand.Read(b[:])
	return json.RawMessage(fmt.Sprintf(`{"uuid":"%x-%x-%x-%x-%x"}`, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// Sleep waits d or until ctx ends: a measurement's pause (memory settling, a poll of a
// hub's gauge), never a test's wait for readiness.
func Sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
