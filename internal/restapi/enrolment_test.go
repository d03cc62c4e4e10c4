package restapi

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
