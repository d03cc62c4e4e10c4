package restapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// call sends a request as dev1 and returns the answer.
func (f *insertFixture) call(method, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, Prefix+path, bytes.NewReader([]byte(body)))
	r.Header.Set("Authorization", "Bearer "+f.token)
	w := httptest.NewRecorder()
	f.api.ServeHTTP(w, r)
	return w
}

// A device reads and answers its own commands, and only its own; it cannot send any;
// whatever it gets wrong is a DeviceHive error and changes nothing. (Accounts sending
// commands are tested end to end, in a hub with the front door's accounts.)
func TestDeviceAnswersItsCommands(t *testing.T) {
	f := newInsertFixture(t)
	ctx := context.Background()
	mine, err := f.store.InsertCommand(ctx, telemetry.Command{Device: "dev1", Name: "valve", Parameters: json.RawMessage(`{"open":true}`), UserID: 3})
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := f.store.InsertCommand(ctx, telemetry.Command{Device: "dev2", Name: "valve"})
	before := telemetry.FormatTime(mine.Timestamp.Add(-1))

	w := f.call("GET", "/device/dev1/command/poll?waitTimeout=0&timestamp="+before, "")
	var got []commandJSON
	if json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || len(got) != 1 || got[0].ID != mine.ID || got[0].Command != "valve" ||
		string(got[0].Parameters) != `{"open":true}` || got[0].UserID != 3 || got[0].Status != nil || string(got[0].Result) != "null" {
		t.Fatalf("poll: %d %s", w.Code, w.Body)
	}

	for _, c := range []struct {
		name, method, path, body string
		code                     int
		says                     string
	}{
		{"a device sends a command", "POST", "/device/dev1/command", `{"command":"x"}`, 403, "devices do not send commands"},
		{"another device's commands", "GET", "/device/dev2/command", "", 404, "dev2 not found"},
		{"answering another device's command", "PUT", fmt.Sprintf("/device/dev2/command/%d", theirs.ID), `{"status":"done"}`, 404, "not found"},
		{"another device's command id on its own path", "PUT", fmt.Sprintf("/device/dev1/command/%d", theirs.ID), `{"status":"done"}`, 404, "command not found"},
		{"malformed answer", "PUT", fmt.Sprintf("/device/dev1/command/%d", mine.ID), `{"status":`, 400, "malformed JSON"},
		{"status too long", "PUT", fmt.Sprintf("/device/dev1/command/%d", mine.ID), `{"status":"` + strings.Repeat("s", 200) + `"}`, 400, "status is longer than 128"},
		{"id not a number", "GET", "/device/dev1/command/first", "", 400, "must be a number"},
		{"bad returnUpdatedCommands", "GET", "/device/dev1/command/poll?returnUpdatedCommands=maybe", "", 400, "want true or false"},
		{"bad sort", "GET", "/device/dev1/command?sortField=colour", "", 400, "sortField"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := f.call(c.method, c.path, c.body)
			if w.Code != c.code {
				t.Fatalf("status %d, want %d: %s", w.Code, c.code, w.Body)
			}
			if msg := checkError(t, w); !strings.Contains(msg, c.says) {
				t.Fatalf("message %q does not say %q", msg, c.says)
			}
		})
	}
	if c, _ := f.store.GetCommand(ctx, "dev1", mine.ID); c.Updated() {
		t.Fatalf("a refused answer changed the command: %+v", c)
	}
	if c, _ := f.store.GetCommand(ctx, "dev2", theirs.ID); c.Updated() {
		t.Fatalf("dev1 changed dev2's command: %+v", c)
	}

	// Not answered yet: its answer poll ends with 204.
	if w := f.call("GET", fmt.Sprintf("/device/dev1/command/%d/poll?waitTimeout=0", mine.ID), ""); w.Code != http.StatusNoContent {
		t.Fatalf("answer poll before the answer: %d %s", w.Code, w.Body)
	}
	if w := f.call("PUT", fmt.Sprintf("/device/dev1/command/%d", mine.ID), `{"status":"done","result":{"opened":true}}`); w.Code != http.StatusNoContent {
		t.Fatalf("answer: %d %s", w.Code, w.Body)
	}
	w = f.call("GET", fmt.Sprintf("/device/dev1/command/%d/poll", mine.ID), "")
	var one commandJSON
	if json.Unmarshal(w.Body.Bytes(), &one); w.Code != 200 || one.Status == nil || *one.Status != "done" || string(one.Result) != `{"opened":true}` || one.LastUpdated <= one.Timestamp {
		t.Fatalf("answer poll: %d %s", w.Code, w.Body)
	}
	w = f.call("GET", "/device/dev1/command?status=done", "")
	if json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || len(got) != 1 || got[0].ID != mine.ID {
		t.Fatalf("list by status: %d %s", w.Code, w.Body)
	}
	w = f.call("GET", "/device/command/poll?returnUpdatedCommands=true&waitTimeout=0&timestamp="+before, "")
	if json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || len(got) != 1 || got[0].ID != mine.ID {
		t.Fatalf("poll for answers: %d %s", w.Code, w.Body)
	}
}

// A command poll's query parameters are untrusted input: any value gives a filter or a
// clear error, never a panic or a negative page.
func FuzzCommandPollFilter(f *testing.F) {
	f.Add("2026-11-23T10:00:00.123456", "open,close", "10", "true")
	f.Add("", "", "-1", "")
	f.Fuzz(func(t *testing.T, ts, names, limit, updated string) {
		flt, err := commandPollFilter(map[string][]string{"timestamp": {ts}, "names": {names}, "limit": {limit}, "returnUpdatedCommands": {updated}}, []string{"dev1"})
		if err == nil && (flt.Take < 0 || flt.Updated == flt.Live) {
			t.Fatalf("filter %+v from %q %q", flt, limit, updated)
		}
	})
}
