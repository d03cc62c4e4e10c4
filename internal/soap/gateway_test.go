package soap

import (
	"bytes"
	"errors"
	"testing"

	"github.com/iotsafe/iotsafe/internal/wssec"
)

// FuzzPlainNotification: whatever a local client posts to the gateway, the reader
// returns a payload that is a notification the endpoint reads back with the same name,
// or an error; it never panics (seeds in testdata/fuzz/FuzzPlainNotification).
func FuzzPlainNotification(f *testing.F) {
	env := func(body string) []byte {
		return []byte(`<s:Envelope xmlns:s="` + wssec.SOAPNS + `"><s:Body>` + body + `</s:Body></s:Envelope>`)
	}
	f.Add(env(string(Notification("temperature", "", [][2]string{{"celsius", "22.5"}, {"celsius", "23"}}))))
	f.Add(env(string(Notification("door", "open & shut", nil))))
	f.Add(env(`<n:Notification xmlns:n="urn:iotsafe:soap:1"/>`))
	f.Add(env(`<x/>`))
	f.Add([]byte(`<a><b>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		payload, err := plainNotification(data)
		if err != nil {
			return
		}
		nodes, err := wssec.Parse(append(append([]byte(`<w xmlns:n="urn:iotsafe:soap:1">`), payload...), "</w>"...), wssec.Limits{})
		if err != nil {
			t.Fatalf("the payload built does not parse: %v\n%s", err, payload)
		}
		if _, _, err := toNotification(nodes.Kids); err != nil && !errors.Is(err, ErrPayload) {
			t.Fatalf("the payload built is not a notification: %v\n%s", err, payload)
		}
		if !bytes.HasPrefix(payload, []byte("<n:Notification")) {
			t.Fatalf("payload %s", payload)
		}
	})
}
