package frontdoor

import "testing"

func TestConfigValidate(t *testing.T) {
	ok := Config{Listen: "127.0.0.1:8443", Domain: "Devices.Example.com."}
	ok.ApplyDefaults()
	if err := ok.Validate(); err != nil || ok.Domain != "devices.example.com" || ok.MaxBody != 10<<20 {
		t.Fatalf("%+v: %v", ok, err)
	}
	for _, bad := range []Config{
		{Listen: "127.0.0.1:8443"},
		{Listen: "nonsense", Domain: "d.example"},
		{Listen: ":1", Domain: "bad_domain.example"},
		{Listen: ":1", Domain: "d.example", Cert: "x.crt"},
		{Listen: ":1", Domain: "d.example", Routes: []Route{{Alias: "A"}}},
		{Listen: ":1", Domain: "d.example", Routes: []Route{{Alias: "a"}, {Alias: "a"}}},
		// The local CA would be constrained to names other people own.
		{Listen: ":1", Domain: "com"}, {Listen: ":1", Domain: "co.uk"}, {Listen: ":1", Domain: "localhost"},
		{Listen: ":1", Domain: "github.io"},
	} {
		bad.ApplyDefaults()
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
