package sshd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/iotsafe/iotsafe/internal/kexinit"
)

// OfferStore keeps what device clients offer in their KEXINIT, once per distinct offer
// (registry.RecordOffer). With a store that has none, offers are not kept.
type OfferStore interface {
	RecordOffer(ctx context.Context, hash, offer string) error
}

// offersSeen are the offers recorded since the server started: a fleet has few client
// configurations, so the registry is written once per configuration, not per session.
type offersSeen struct {
	mu   sync.Mutex
	seen map[string]bool
}

// maxOffersSeen bounds offersSeen; past it the set starts over (a write again per
// offer is all that costs).
const maxOffersSeen = 4096

// OfferHash names an offer: the first 128 bits of the SHA-256 of its JSON.
func OfferHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// recordOffer keeps a client's offer and returns its hash ("" when there is none).
func (s *Server) recordOffer(o *kexinit.Offer) string {
	if o == nil {
		return ""
	}
	b, err := json.Marshal(o)
	if err != nil {
		return ""
	}
	h := OfferHash(b)
	st, ok := s.store.(OfferStore)
	if !ok {
		return ""
	}
	s.offers.mu.Lock()
	known := s.offers.seen[h]
	s.offers.mu.Unlock()
	if known {
		return h
	}
	ctx, cancel := context.WithTimeout(s.life, s.cfg.HandshakeTimeout)
	defer cancel()
	if err := st.RecordOffer(ctx, h, string(b)); err != nil {
		s.log.Warn("recording a client's algorithm offer failed", "err", err)
		return ""
	}
	s.offers.mu.Lock()
	if s.offers.seen == nil || len(s.offers.seen) >= maxOffersSeen {
		s.offers.seen = map[string]bool{}
	}
	s.offers.seen[h] = true
	s.offers.mu.Unlock()
	return h
}
