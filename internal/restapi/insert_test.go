package restapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/access"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// noHub answers the API's questions to the hub for handlers that never change a device:
// the inserts tested here. The e2e tests run the API inside a real hub.
type noHub struct{}

func (noHub) Policy() *access.Policy                                  { return access.NewPolicy(nil, nil, -1) }
func (noHub) RevokeDevice(context.Context, string, string) error      { return nil }
func (noHub) RemoveDevice(context.Context, string) error              { return nil }
func (noHub) RegisterDevice(context.Context, string, []string) error  { return nil }
func (noHub) SetDeviceGroups(context.Context, string, []string) error { return nil }
func (noHub) AddGroup(context.Context, string, string, string) (registry.GroupInfo, error) {
	return registry.GroupInfo{}, nil
}
func (noHub) RemoveGroup(context.Context, string) error { return nil }

// insertFixture is an API on a real registry and store with devices dev1 and dev2, and
// an access token of dev1.
type insertFixture struct {
	tokens *authn.Tokens
	api    *API
	reg    *registry.Registry
	store  *telemetry.Store
	token  string
}

func newInsertFixture(t testing.TB) *insertFixture {
	t.Helper()
	return newInsertFixtureWith(t, Config{MaxBody: 1024})
}

func newInsertFixtureWith(t testing.TB, cfg Config) *insertFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	reg, err := registry.Open(ctx, dir, sockets.Config{CIDR: "127.79.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	for _, name := range []string{"dev1", "dev2"} {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		pub, _ := ssh.NewPublicKey(k.Public())
		if _, err := reg.AddDevice(ctx, name, "default", pub); err != nil {
			t.Fatal(err)
		}
	}
	store, err := telemetry.Open(ctx, dir, telemetry.Config{}, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	tokens, _, err := authn.Open(dir, authn.Config{Algorithm: authn.HS256})
	if err != nil {
		t.Fatal(err)
	}
	api := New(cfg, reg, nil, store, noHub{}, tokens, nil, slog.New(slog.DiscardHandler))
	if err := api.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := api.dir.Load().Device("dev1")
	tok, _, err := tokens.Issue(authn.Access, authn.KindDevice, "dev1", st.Gen(), "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &insertFixture{api: api, reg: reg, store: store, token: tok, tokens: tokens}
}

// post sends body as dev1 to path and returns the answer.
func (f *insertFixture) post(path string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, Prefix+path, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+f.token)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	f.api.ServeHTTP(w, r)
	return w
}

func (f *insertFixture) stored(t testing.TB) []telemetry.Notification {
	t.Helper()
	got, err := f.store.List(context.Background(), telemetry.Filter{Take: telemetry.MaxTake})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkError asserts a DeviceHive error body: {"error": code, "message": text}.
func checkError(t testing.TB, w *httptest.ResponseRecorder) string {
	t.Helper()
	var e struct {
		Error   int    `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error != w.Code || e.Message == "" {
		t.Fatalf("status %d with body %q: not a DeviceHive error body", w.Code, w.Body.String())
	}
	return e.Message
}

func TestInsertRefusalsStoreNothing(t *testing.T) {
	f := newInsertFixture(t)
	for _, c := range []struct {
		name, path, body string
		code             int
		says             string
	}{
		{"malformed JSON", "/device/dev1/notification", `{"notification":`, 400, "malformed JSON"},
		{"two values", "/device/dev1/notification", `{"notification":"a"} {}`, 400, "after top-level value"},
		{"not an object", "/device/dev1/notification", `["a"]`, 400, "malformed JSON"},
		{"no name", "/device/dev1/notification", `{"parameters":{"t":1}}`, 400, `"notification"`},
		{"bad timestamp", "/device/dev1/notification", `{"notification":"a","timestamp":"yesterday"}`, 400, "timestamp"},
		{"over the limit", "/device/dev1/notification", `{"notification":"a","parameters":"` + strings.Repeat("x", 2000) + `"}`, 413, "larger than 1024"},
		{"another device", "/device/dev2/notification", `{"notification":"a"}`, 403, "only its own"},
		{"unknown device", "/device/nosuch/notification", `{"notification":"a"}`, 403, "only its own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := f.post(c.path, []byte(c.body))
			if w.Code != c.code {
				t.Fatalf("status %d, want %d: %s", w.Code, c.code, w.Body)
			}
			if msg := checkError(t, w); !strings.Contains(msg, c.says) {
				t.Fatalf("message %q does not say %q", msg, c.says)
			}
		})
	}
	if got := f.stored(t); len(got) != 0 {
		t.Fatalf("refused requests stored %d notifications", len(got))
	}
	w := f.post("/device/dev1/notification", []byte(`{"notification":"temp","parameters":{"c":21.5},"timestamp":"2026-11-23T08:00:00.123"}`))
	if w.Code != http.StatusCreated {
		t.Fatalf("a good notification: %d %s", w.Code, w.Body)
	}
	got := f.stored(t)
	if len(got) != 1 || got[0].Name != "temp" || string(got[0].Parameters) != `{"c":21.5}` || got[0].DeviceTime == nil {
		t.Fatalf("stored %+v", got)
	}
}

// FuzzInsertNotification sends any body to POST /device/dev1/notification: the answer is
// 201 and exactly that notification is stored (valid JSON parameters, its name), or a
// 4xx with a DeviceHive error body and nothing stored. Seeds in testdata/fuzz.
func FuzzInsertNotification(f *testing.F) {
	for _, s := range []string{
		`{"notification":"temp","parameters":{"c":21.5}}`,
		`{"notification":"temp","parameters":null,"timestamp":"2026-11-23T08:00:00.123456"}`,
		`{"notification":"","parameters":[1,2]}`,
		`{"notification":"a","timestamp":"2026-13-01T00:00:00"}`,
		`{"notification":"a"}{"notification":"b"}`,
		`{"notification":"\u0000\ud800"}`,
		`{"notification":1}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	fx := newInsertFixture(f)
	// newest are the two notifications of highest id: the store outgrows a List page
	// in a long fuzz run, so what one request added is read by id.
	newest := func(t *testing.T) (top, second int64, n telemetry.Notification) {
		got, err := fx.store.List(context.Background(), telemetry.Filter{SortBy: telemetry.SortByID, Desc: true, Take: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 {
			top, n = got[0].ID, got[0]
		}
		if len(got) > 1 {
			second = got[1].ID
		}
		return top, second, n
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		before, _, _ := newest(t)
		w := fx.post("/device/dev1/notification", body)
		top, second, n := newest(t)
		switch {
		case w.Code == http.StatusCreated:
			var ans struct {
				ID        int64  `json:"id"`
				Timestamp string `json:"timestamp"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || ans.ID == 0 || ans.Timestamp == "" {
				t.Fatalf("201 with body %q", w.Body)
			}
			if top != ans.ID || second != before {
				t.Fatalf("201 with id %d, but the newest ids are %d and %d (%d before)", ans.ID, top, second, before)
			}
			if n.ID != ans.ID || n.Name == "" || (n.Parameters != nil && !json.Valid(n.Parameters)) {
				t.Fatalf("stored %+v for answer %+v", n, ans)
			}
		case w.Code >= 400 && w.Code < 500:
			checkError(t, w)
			if top != before {
				t.Fatalf("refused with %d but stored id %d", w.Code, top)
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	})
}
