package sshext

import (
	"reflect"
	"strings"
	"testing"
)

// A batch of announcements and its replies survive the wire as they were.
func TestAnnounceBatchRoundTrip(t *testing.T) {
	as := []Announce{
		{Device: "cam-1", Aliases: []string{"http", "rtsp"}, Key: "SHA256:abc", Client: "SSH-2.0-OpenSSH_9.2", Cipher: "chacha20-poly1305@openssh.com", Remote: "10.0.0.5:40000"},
		{Device: "cam-2", Aliases: []string{"http"}},
	}
	got, err := ParseAnnounces(MarshalAnnounces(as))
	if err != nil || !reflect.DeepEqual(got, as) {
		t.Fatalf("announces: %+v %v", got, err)
	}
	rs := []AnnounceReply{{Served: []string{"http"}}, {Refused: "revoked", Revoked: true}}
	back, err := ParseAnnounceReplies(MarshalAnnounceReplies(rs))
	if err != nil || len(back) != 2 || !back[1].Revoked || back[0].Served[0] != "http" {
		t.Fatalf("replies: %+v %v", back, err)
	}
	if empty, err := ParseAnnounces(MarshalAnnounces(nil)); err != nil || len(empty) != 0 {
		t.Fatalf("empty batch: %v %v", empty, err)
	}
}

// Malformed batches are errors, never panics or huge allocations.
func TestAnnounceBatchMalformed(t *testing.T) {
	good := MarshalAnnounces([]Announce{{Device: "cam-1", Aliases: []string{"http"}}})
	tooMany := MarshalAnnounces(make([]Announce, MaxAnnounceBatch+1))
	for name, b := range map[string][]byte{
		"empty":        nil,
		"cut":          good[:len(good)-3],
		"trailing":     append(append([]byte{}, good...), 0),
		"too many":     tooMany,
		"huge count":   {0xff, 0xff, 0xff, 0xff},
		"huge record":  {0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
		"not a record": {0, 0, 0, 1, 0, 0, 0, 1, 7},
	} {
		if _, err := ParseAnnounces(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzParseAnnounces: whatever a gateway sends, parsing ends in records or an error,
// and what parses encodes back to the same bytes.
func FuzzParseAnnounces(f *testing.F) {
	f.Add(MarshalAnnounces([]Announce{{Device: "cam-1", Aliases: []string{"http", "rtsp"}, Key: "SHA256:x"}}))
	f.Add(MarshalAnnounces(nil))
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 0})
	f.Add(MarshalAnnounces([]Announce{{Device: "cam-1", Client: "SSH-2.0-x\nforged", Remote: "10.0.0.1:22\x1b[2J"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		as, err := ParseAnnounces(b)
		if err != nil {
			return
		}
		if len(as) > MaxAnnounceBatch {
			t.Fatalf("%d records", len(as))
		}
		again, err := ParseAnnounces(MarshalAnnounces(as))
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(as)) {
			t.Fatalf("re-encoding changed %+v into %+v (%v)", as, again, err)
		}
		// What Check lets through is safe to store and print: short printable ASCII.
		for _, a := range as {
			if a.Check() != nil {
				continue
			}
			for _, v := range append([]string{a.Key, a.Client, a.Cipher, a.Remote}, a.Aliases...) {
				if len(v) > maxAnnounceField || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
					t.Fatalf("Check let %q through", v)
				}
			}
		}
	})
}

// normalize treats an empty alias list and a missing one alike (the wire cannot tell).
func normalize(as []Announce) []Announce {
	for i := range as {
		if len(as[i].Aliases) == 0 {
			as[i].Aliases = nil
		}
	}
	return as
}
