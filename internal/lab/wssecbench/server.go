package wssecbench

import (
	"compress/flate"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/soap"
	"github.com/iotsafe/iotsafe/internal/wssec"
)

// server is the lab's SOAP service on loopback: /plain answers unsecured envelopes (over
// plain HTTP, and over HTTPS for the TLS rows), /secured opens either compact form and
// answers sealed the same way. It does what the hub's endpoint does with a message except
// storing it, so the rows differ only in how the message is secured.
type server struct {
	plain, tls net.Listener
	http       *http.Server
	key        wssec.Key
	trust      *tls.Config
	recv       *wssec.Receiver
	ring       *wssec.Keyring
	ids        atomic.Int64
}

// maxRequest bounds a request body, inflated or not.
const maxRequest = 1 << 20

// startServer starts the service; listen binds its listeners (on loopback, or inside
// the gateway's namespace of an emulated link).
func startServer(dir string, listen func() (net.Listener, error)) (*server, error) {
	s := &server{}
	var err error
	if s.key, err = wssec.NewKey(); err != nil {
		return nil, err
	}
	certFile, keyFile, trust, err := lab.WriteServerCert(dir, "wssec", false)
	if err != nil {
		return nil, err
	}
	s.trust = trust
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	// The lab accepts every suite, RC4 included, to reproduce the paper's rows.
	s.ring = wssec.NewKeyring(0)
	s.recv = &wssec.Receiver{Policy: wssec.LabPolicy(), Replay: wssec.NewReplay(0, 0), Keyring: s.ring,
		Key: func(id string) (wssec.Key, bool) { return s.key, id == s.key.ID }}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /plain", s.handlePlain)
	mux.HandleFunc("POST /secured", s.handleSecured)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if s.plain, err = listen(); err != nil {
		return nil, err
	}
	ln, err := listen()
	if err != nil {
		s.plain.Close()
		return nil, err
	}
	s.tls = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}})
	go s.http.Serve(s.plain)
	go s.http.Serve(s.tls)
	return s, nil
}

func (s *server) Close() { s.http.Close() }

// body reads the request, inflating a deflated one.
func body(r *http.Request) ([]byte, error) {
	var rd io.Reader = io.LimitReader(r.Body, maxRequest)
	if r.Header.Get("Content-Encoding") == "deflate" {
		fr := flate.NewReader(rd)
		defer fr.Close()
		rd = io.LimitReader(fr, maxRequest)
	}
	return io.ReadAll(rd)
}

func (s *server) answer(relatesTo string) wssec.Message {
	return wssec.Message{Action: soap.ActionNotifyResponse, MessageID: wssec.NewMessageID(), RelatesTo: relatesTo, Created: time.Now(),
		Body: soap.AckPayload(s.ids.Add(1), time.Now().UTC().Format(wssec.TimeLayout))}
}

func (s *server) handlePlain(w http.ResponseWriter, r *http.Request) {
	b, err := body(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m, _, err := wssec.ReadPlain(b, wssec.Limits{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := wssec.Plain(s.answer(m.MessageID))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", soap.ContentType)
	w.Write(out)
}

func (s *server) handleSecured(w http.ResponseWriter, r *http.Request) {
	b, err := body(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o, err := s.recv.Open(b)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := s.ring.Seal(o.Format, s.answer(o.MessageID), o.Suite, s.key)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", soap.ContentType)
	w.Write(out)
}
