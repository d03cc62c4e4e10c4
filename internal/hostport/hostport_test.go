package hostport

import "testing"

func TestListenAndDial(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:2222": true, ":8443": true, "[::1]:0": true, "localhost:1883": true,
		"127.0.0.1:abc": false, "127.0.0.1:99999": false, "127.0.0.1:-1": false, "127.0.0.1": false, "": false, "127.0.0.1:http": false,
		"127.0.0.1:+80": false, "127.0.0.1:080": false, "::1:80": false} {
		if err := Listen(addr); (err == nil) != want {
			t.Errorf("Listen(%q) = %v, want ok=%v", addr, err, want)
		}
	}
	for addr, want := range map[string]bool{"hub.example:2222": true, "10.0.0.1:22": true, ":22": false, "hub:0": false, "hub:x": false} {
		if err := Dial(addr); (err == nil) != want {
			t.Errorf("Dial(%q) = %v, want ok=%v", addr, err, want)
		}
	}
}
