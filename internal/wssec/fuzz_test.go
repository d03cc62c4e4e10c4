package wssec

import (
	"bytes"
	"testing"
)

// fuzzKey is fixed so the seeds in testdata/fuzz (real messages) open.
var fuzzKey = Key{ID: "kfuzz", Secret: bytes.Repeat([]byte{7}, KeySize)}

func fuzzReceiver() *Receiver {
	r := receiver(fuzzKey, LabPolicy())
	r.Replay = nil
	return r
}

// Parse either refuses a document or yields a tree that writes back to XML which parses
// to the same canonical form.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`<a xmlns="urn:x" xmlns:p="urn:p" p:b="1&amp;">t<p:c/></a>`))
	f.Add([]byte(`<!DOCTYPE a [<!ENTITY e "x">]><a>&e;</a>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		root, err := Parse(b, Limits{})
		if err != nil {
			return
		}
		c := Canonicalize(root, nil)
		again, err := Parse(root.Marshal(), Limits{})
		if err != nil {
			t.Fatalf("written back, it does not parse: %v\n%s", err, root.Marshal())
		}
		if c2 := Canonicalize(again, nil); !bytes.Equal(c, c2) {
			t.Fatalf("canonical forms differ:\n%s\n%s", c, c2)
		}
	})
}

// Open refuses or opens; what opens as CSec maps to classic and back and opens again
// to the same payload.
func FuzzOpen(f *testing.F) {
	s, _ := SuiteByName(DefaultSuite)
	for _, fm := range []Format{CSec, SecRec} {
		out, err := Seal(fm, msg(1), s, fuzzKey)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(out)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := fuzzReceiver().Open(b)
		if err != nil || o.Format != CSec || o.Suite.XMLEnc == "" {
			return
		}
		classic, err := ToClassic(b, Limits{})
		if err != nil {
			return // e.g. an id the classic form's ds:KeyName cannot hold
		}
		back, err := FromClassic(classic, Limits{})
		if err != nil {
			t.Fatalf("classic form of an opened message does not map back: %v\n%s", err, classic)
		}
		o2, err := fuzzReceiver().Open(back)
		if err != nil || !bytes.Equal(o2.Body, o.Body) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FromClassic refuses or writes a compact message, never panics.
func FuzzFromClassic(f *testing.F) {
	s, _ := SuiteByName(DefaultSuite)
	out, _ := Seal(CSec, msg(1), s, fuzzKey)
	classic, err := ToClassic(out, Limits{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(classic)
	f.Fuzz(func(t *testing.T, b []byte) {
		compact, err := FromClassic(b, Limits{})
		if err != nil {
			return
		}
		if _, err := Parse(compact, Limits{}); err != nil {
			t.Fatalf("FromClassic wrote XML that does not parse: %v", err)
		}
	})
}
