package frontdoor

import "testing"

// The login page's next= must lead back into the front door, as a browser would read it.
func TestSafeNext(t *testing.T) {
	s := &Server{cfg: Config{Domain: "devices.example.com"}}
	for _, next := range []string{"/", "/devices", "/a?b=c", "https://dev1.devices.example.com/x"} {
		if !s.safeNext(next) {
			t.Errorf("%q refused", next)
		}
	}
	for _, next := range []string{"", "//evil.com", "/\\evil.com", "/\t/evil.com", "/\n/evil.com", "/\r/evil.com",
		" //evil.com", "\x00//evil.com", "/\x7f/evil.com", "https://evil.com/", "http://dev1.devices.example.com/",
		"https://user@dev1.devices.example.com/", "https://devices.example.com.evil.com/", "javascript:alert(1)", "/\\/evil.com"} {
		if s.safeNext(next) {
			t.Errorf("%q accepted", next)
		}
	}
}
