package wsapi

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in, action, reqID, err string
		fields                 int
	}{
		{in: `{"action":"device/get","requestId":"r1","deviceId":"d1"}`, action: "device/get", reqID: `"r1"`, fields: 1},
		{in: `{"action":"server/info","requestId":7}`, action: "server/info", reqID: `7`},
		{in: `{"action":"server/info"}`, action: "server/info"},
		{in: `[1,2]`, err: "a message is a JSON object"},
		{in: `null`, err: "a message is a JSON object"},
		{in: `{"requestId":"r1"}`, reqID: `"r1"`, err: "names no action"},
		{in: `{"action":5}`, err: "names no action"},
		{in: `{"action":""}`, err: "names no action"},
		{in: `{"action":"a"`, err: "a message is a JSON object"},
	} {
		action, reqID, fields, err := parseMessage([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || string(reqID) != tc.reqID {
				t.Errorf("%s: %v, requestId %s; want %q, requestId %s", tc.in, err, reqID, tc.err, tc.reqID)
			}
			continue
		}
		if err != nil || action != tc.action || string(reqID) != tc.reqID || len(fields) != tc.fields {
			t.Errorf("%s: %q %s %v %v", tc.in, action, reqID, fields, err)
		}
	}
}

func TestQueryOf(t *testing.T) {
	q, err := queryOf(map[string]json.RawMessage{
		"names": json.RawMessage(`["a","b",3]`), "take": json.RawMessage(`10`), "returnUpdatedCommands": json.RawMessage(`true`),
		"timestamp": json.RawMessage(`"2026-11-28T10:00:00.000000"`), "gone": json.RawMessage(`null`), "none": json.RawMessage(`[]`),
	})
	want := url.Values{"names": {"a,b,3"}, "take": {"10"}, "returnUpdatedCommands": {"true"}, "timestamp": {"2026-11-28T10:00:00.000000"}}
	if err != nil || q.Encode() != want.Encode() {
		t.Fatalf("got %v %v, want %v", q, err, want)
	}
	for _, bad := range []string{`{"a":1}`, `[{"a":1}]`, `[[1]]`} {
		if _, err := queryOf(map[string]json.RawMessage{"f": json.RawMessage(bad)}); err == nil || !strings.Contains(err.Error(), "f:") {
			t.Errorf("%s: %v, want a refusal naming the field", bad, err)
		}
	}
}

func TestFillPath(t *testing.T) {
	msg := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		json.Unmarshal([]byte(s), &m)
		return m
	}
	for _, tc := range []struct {
		path, msg, device, want, err string
	}{
		{"/device/{deviceId}/command/{commandId}", `{"deviceId":"d1","commandId":42}`, "", "/device/d1/command/42", ""},
		{"/device/{deviceId}/notification", `{}`, "d7", "/device/d7/notification", ""},
		{"/device/{deviceId}", `{}`, "", "", `needs "deviceId"`},
		{"/device/{deviceId}", `{"deviceId":"a/../b"}`, "", "/device/a%2F..%2Fb", ""},
		{"/device/{deviceId}", `{"deviceId":{"x":1}}`, "", "", "deviceId: want a string"},
	} {
		got, err := fillPath(tc.path, msg(tc.msg), tc.device)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %s: %q %v, want %q", tc.path, tc.msg, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %s: %q %v, want %q", tc.path, tc.msg, got, err, tc.want)
		}
	}
}

func TestEnvelope(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{"", `{"action":"a/b","requestId":"r","status":"success"}`},
		{"{}\n", `{"action":"a/b","requestId":"r","status":"success"}`},
		{`{"accessToken":"x"}` + "\n", `{"action":"a/b","requestId":"r","status":"success","accessToken":"x"}`},
		{`[1]`, `{"action":"a/b","requestId":"r","status":"success"}`}, // not an object: nothing merged
	} {
		if got := string(envelope("a/b", json.RawMessage(`"r"`), "success", []byte(tc.body))); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.body, got, tc.want)
		}
	}
}

// FuzzMessage feeds a client's message through everything that reads it before the
// REST API does: the answer the hub builds is valid JSON whatever came in.
func FuzzMessage(f *testing.F) {
	f.Add([]byte(`{"action":"command/get","requestId":"r1","deviceId":"d1","commandId":3}`))
	f.Add([]byte(`{"action":"notification/subscribe","requestId":1,"deviceIds":["a","b"],"names":["x"],"timestamp":"2026-01-01T00:00:00"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		action, reqID, fields, err := parseMessage(data)
		if err != nil {
			if !json.Valid(envelope("", reqID, "error", nil)) {
				t.Fatalf("error envelope for %q is not JSON", data)
			}
			return
		}
		if rt, ok := routes[action]; ok {
			if _, err := fillPath(rt.path, fields, "d1"); err != nil {
				return
			}
		}
		if q, err := queryOf(fields); err == nil {
			if _, err := url.ParseQuery(q.Encode()); err != nil {
				t.Fatalf("query %q does not parse back: %v", q.Encode(), err)
			}
		}
		if !json.Valid(envelope(action, reqID, "success", data)) {
			t.Fatalf("envelope for %q is not JSON", data)
		}
	})
}
