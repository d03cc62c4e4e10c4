package frontdoor

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/profile"
)

func TestParseHost(t *testing.T) {
	const dom = "devices.example.com"
	for host, want := range map[string]Target{
		"devices.example.com":                {Portal: true},
		"DEVICES.example.com.:8443":          {Portal: true},
		"dev42.devices.example.com":          {Device: "dev42", Alias: "http"},
		"dev42.devices.example.com:8443":     {Device: "dev42", Alias: "http"},
		"cam.dev42.devices.example.com":      {Device: "dev42", Alias: "cam"},
		"Cam.Dev-42.Devices.Example.Com.":    {Device: "dev-42", Alias: "cam"},
		"mqtt-ws.gw-1.devices.example.com:1": {Device: "gw-1", Alias: "mqtt-ws"},
	} {
		got, err := ParseHost(host, dom)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", host, got, err, want)
		}
	}
	for _, host := range []string{
		"", "example.com", "xdevices.example.com", "dev42.xdevices.example.com", ".devices.example.com",
		"a.b.dev42.devices.example.com", "dev_42.devices.example.com", "-x.devices.example.com",
		"127.0.0.1:8443", "[::1]:8443", "dev42.devices.example.com.evil.com", "a..devices.example.com",
		strings.Repeat("a", 300) + ".devices.example.com",
	} {
		if got, err := ParseHost(host, dom); !errors.Is(err, ErrUnknownHost) {
			t.Errorf("%q: got %+v, %v; want ErrUnknownHost", host, got, err)
		}
	}
}

// FuzzParseHost: whatever a client sends as Host or SNI, the router either refuses it or
// yields valid names (the only thing that reaches a registry query) under the domain.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"devices.example.com", "cam.dev42.devices.example.com:443", "dev42.devices.example.com.", "[::1]:1", "a.b.c.devices.example.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got, err := ParseHost(host, "devices.example.com")
		if err != nil {
			if !errors.Is(err, ErrUnknownHost) {
				t.Fatalf("%q: unexpected error %v", host, err)
			}
			return
		}
		if got.Portal {
			if got.Device != "" || got.Alias != "" {
				t.Fatalf("%q: portal with a device: %+v", host, got)
			}
			return
		}
		if !profile.ValidName(got.Device) || !profile.ValidName(got.Alias) {
			t.Fatalf("%q: invalid names %+v", host, got)
		}
		if !strings.Contains(strings.ToLower(host), got.Device+".devices.example.com") {
			t.Fatalf("%q: device %q not in the host", host, got.Device)
		}
	})
}

// FuzzStripSessionCookie: whatever Cookie header a client sends, the front door's session
// cookie never reaches the device.
func FuzzStripSessionCookie(f *testing.F) {
	f.Add("a=1; iotsafe_session=secret; b=2")
	f.Fuzz(func(t *testing.T, cookie string) {
		h := http.Header{}
		h.Add("Cookie", cookie)
		stripSessionCookie(h)
		r := &http.Request{Header: h}
		if _, err := r.Cookie(SessionCookie); err == nil {
			t.Fatalf("%q: session cookie survived as %q", cookie, h.Get("Cookie"))
		}
	})
}
