package restapi

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// A stream belongs to the enrolment that opened it (issue 48, item 5): once its device
// is removed and another is enrolled under the same name, the stream ends instead of
// delivering the new device's notifications.
func TestStreamEndsWithItsEnrolment(t *testing.T) {
	f := newInsertFixture(t)
	ctx := context.Background()
	srv := httptest.NewServer(f.api)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+Prefix+"/device/notification/stream", nil)
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), ": iotsafe") {
		t.Fatalf("stream start: %q", lines.Text())
	}

	if err := f.reg.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	pub, _ := ssh.NewPublicKey(k.Public())
	if _, err := f.reg.AddDevice(ctx, "dev1", "default", pub); err != nil {
		t.Fatal(err)
	}
	if err := f.api.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Append(ctx, telemetry.Notification{Device: "dev1", Name: "the new dev1"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for lines.Scan() {
		got = append(got, lines.Text())
	}
	all := strings.Join(got, "\n")
	if strings.Contains(all, "the new dev1") || !strings.Contains(all, "event: end") {
		t.Fatalf("the old enrolment's stream after re-enrolment:\n%s", all)
	}
}

// One device cannot take every long-poll place (issue 48, item 6): past its own budget
// it gets 429 naming the limit, another device still gets a place, and when the hub's
// places are all taken the answer says so (503), not that the store is busy.
func TestPollPlacesHaveAPerDeviceBudget(t *testing.T) {
	f := newInsertFixtureWith(t, Config{MaxPolls: 3, MaxPollsPerDevice: 2})
	srv := httptest.NewServer(f.api)
	t.Cleanup(srv.Close) // after the streams' bodies close (cleanups run last first)
	st2, _ := f.api.dir.Load().Device("dev2")
	tok2, _, _ := f.tokens.Issue("ACCESS", "device", "dev2", st2.Gen(), f.api.dir.Load().Cred("dev2"), time.Hour)
	open := func(tok string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+Prefix+"/device/notification/stream", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	message := func(resp *http.Response) string {
		var body struct{ Message string }
		json.NewDecoder(resp.Body).Decode(&body)
		return body.Message
	}
	for i := range 2 {
		if resp := open(f.token); resp.StatusCode != 200 {
			t.Fatalf("dev1's stream %d: %d", i, resp.StatusCode)
		}
	}
	if resp := open(f.token); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(message(resp), "rest.max_polls_per_device") {
		t.Fatalf("dev1 past its budget: %d", resp.StatusCode)
	}
	if resp := open(tok2); resp.StatusCode != 200 {
		t.Fatalf("dev2 while dev1 is at its budget: %d", resp.StatusCode)
	}
	if resp := open(tok2); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(message(resp), "rest.max_polls") {
		t.Fatalf("the hub's places all taken: %d", resp.StatusCode)
	}
}

// A device replacing its data in a loop is held to rest.device_data_rate (issue 48,
// item 12): past its burst it gets 429 naming the setting, and the write is not made;
// another device still writes.
func TestDeviceDataWritesAreRateLimited(t *testing.T) {
	f := newInsertFixtureWith(t, Config{DeviceDataRate: 0.001}) // no refill during the test
	srv := httptest.NewServer(f.api)
	t.Cleanup(srv.Close)
	put := func(tok, dev, data string) (int, string) {
		req, _ := http.NewRequest("PUT", srv.URL+Prefix+"/device/"+dev, strings.NewReader(`{"data":`+data+`}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Message string }
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Message
	}
	for i := range 5 {
		if code, msg := put(f.token, "dev1", fmt.Sprintf(`{"n":%d}`, i)); code != http.StatusNoContent {
			t.Fatalf("write %d within the burst: %d %s", i, code, msg)
		}
	}
	if code, msg := put(f.token, "dev1", `{"n":"flood"}`); code != http.StatusTooManyRequests || !strings.Contains(msg, "rest.device_data_rate") {
		t.Fatalf("past the burst: %d %s", code, msg)
	}
	if d, _ := f.reg.DeviceData(context.Background(), "dev1"); strings.Contains(string(d), "flood") {
		t.Fatalf("a refused write was made: %s", d)
	}
	st2, _ := f.api.dir.Load().Device("dev2")
	tok2, _, _ := f.tokens.Issue("ACCESS", "device", "dev2", st2.Gen(), f.api.dir.Load().Cred("dev2"), time.Hour)
	if code, msg := put(tok2, "dev2", `{"ok":true}`); code != http.StatusNoContent {
		t.Fatalf("another device: %d %s", code, msg)
	}
}
