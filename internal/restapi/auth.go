package restapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/accessnote"
	"github.com/iotsafe/iotsafe/internal/authn"
	"github.com/iotsafe/iotsafe/internal/devicedir"
	"github.com/iotsafe/iotsafe/internal/deviceplain"
	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// EventAuthRefused is recorded (at most once a minute per address and reason) when a
// token is forged, tampered with, unsigned or names a gone or revoked device.
const EventAuthRefused = "telemetry_auth_refused"

// caller is who sent a request: a device or a front-door account.
type caller struct {
	device    string // a device, or ""
	gen       int64  // the device's enrolment (registry.DeviceState.Gen) it proved
	accountID int64
	account   string
	via       string // token, address, password, api-token
	// cred is the credential generation a token carried ("" otherwise): a stream or
	// socket outlives neither the device's secret nor the account's password it proved.
	cred string
}

func (c caller) String() string {
	if c.device != "" {
		return "device " + c.device
	}
	return "account " + c.account
}

// provenDevice is the device a plain listener's request comes from without credentials
// (deviceplain.Device): via says how it was proved.
func (a *API) provenDevice(r *http.Request) (registry.DeviceState, string, bool) {
	return deviceplain.Device(r, a.dir.Load())
}

func (a *API) authed(fn func(http.ResponseWriter, *http.Request, caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, code, msg := a.identify(r)
		if code != 0 {
			fail(w, code, msg)
			return
		}
		accessnote.Set(r.Context(), c.account, c.device)
		fn(w, r, c)
	}
}

func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// identify finds the caller: a token or password in the Authorization header, else on
// the plain listener the pool address the request comes from.
func (a *API) identify(r *http.Request) (caller, int, string) {
	ip := remoteAddr(r)
	h := r.Header.Get("Authorization")
	if h == "" {
		if st, via, ok := a.provenDevice(r); ok {
			if st.Revoked {
				return caller{}, http.StatusUnauthorized, fmt.Sprintf("device %s is revoked", st.Name)
			}
			return caller{device: st.Name, gen: st.Gen(), via: via}, 0, ""
		}
		return caller{}, http.StatusUnauthorized, "log in: Authorization: Bearer ACCESS_TOKEN (from POST " + Prefix + "/token)"
	}
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "bearer":
		if strings.Count(cred, ".") == 2 {
			return a.fromJWT(r, ip, cred, authn.Access)
		}
		if acc := a.accountsOrNil(); acc != nil {
			p, err := acc.Token(ip.String(), cred)
			if err == nil {
				return caller{accountID: p.ID, account: p.Name, via: "api-token"}, 0, ""
			}
			return caller{}, http.StatusUnauthorized, err.Error()
		}
		return caller{}, http.StatusUnauthorized, "invalid token"
	case "basic":
		name, pw, ok := r.BasicAuth()
		acc := a.accountsOrNil()
		if !ok || acc == nil {
			return caller{}, http.StatusUnauthorized, "HTTP Basic is for front-door accounts on the front door's listener"
		}
		p, err := acc.Password(r.Context(), ip.String(), name, pw)
		if err != nil {
			return caller{}, http.StatusUnauthorized, err.Error()
		}
		return caller{accountID: p.ID, account: p.Name, via: "password"}, 0, ""
	}
	return caller{}, http.StatusUnauthorized, "unsupported Authorization scheme: use Bearer"
}

// fromJWT verifies a token of type want and checks that its subject still exists in the
// same incarnation and is not revoked.
func (a *API) fromJWT(r *http.Request, ip netip.Addr, tok, want string) (caller, int, string) {
	cl, tm, err := a.tokens.VerifyTimed(tok, want)
	a.metrics.observeJWT(tm.Alg, tm.Total, tm.Signature)
	switch {
	case errors.Is(err, authn.ErrExpired):
		if want == authn.Access {
			return caller{}, http.StatusUnauthorized, "access token expired: get a new one at POST " + Prefix + "/token/refresh"
		}
		return caller{}, http.StatusUnauthorized, "refresh token expired: log in again at POST " + Prefix + "/token"
	case errors.Is(err, authn.ErrWrongType) && want == authn.Access:
		return caller{}, http.StatusUnauthorized, "a refresh token cannot call the API: exchange it at POST " + Prefix + "/token/refresh"
	case errors.Is(err, authn.ErrWrongType):
		return caller{}, http.StatusUnauthorized, "an access token cannot refresh: send the refresh token"
	case err != nil:
		a.refused(r, ip, "", "token refused: "+err.Error())
		return caller{}, http.StatusUnauthorized, "invalid token"
	}
	if a.unsigned {
		if _, alg := a.tokens.CurrentKey(); alg == authn.None {
			a.log.Warn("request with an unsigned token (jwt.allow_unsigned is on)", "subject", cl.Subject, "remote", ip.String())
		}
	}
	switch cl.Kind {
	case authn.KindDevice:
		st, ok := a.dir.Load().Device(cl.Subject)
		switch {
		case !ok || st.Gen() != cl.Gen:
			a.refused(r, ip, cl.Subject, "token of a removed device")
			return caller{}, http.StatusUnauthorized, "the token's device no longer exists"
		case st.Revoked:
			a.refused(r, ip, cl.Subject, "token of a revoked device")
			return caller{}, http.StatusUnauthorized, fmt.Sprintf("device %s is revoked", cl.Subject)
		case cl.Cred != a.dir.Load().Cred(cl.Subject):
			a.refused(r, ip, cl.Subject, "token of a replaced secret")
			return caller{}, http.StatusUnauthorized, "the token was issued under the device's earlier secret: log in again at POST " + Prefix + "/token"
		}
		return caller{device: cl.Subject, gen: cl.Gen, via: "token", cred: cl.Cred}, 0, ""
	default:
		acc := a.accountsOrNil()
		name, ok := "", false
		if acc != nil {
			name, ok = acc.Name(cl.Gen)
		}
		if !ok || name != cl.Subject {
			return caller{}, http.StatusUnauthorized, "the token's account no longer exists"
		}
		if cred, _ := acc.Credential(cl.Gen); cred != cl.Cred {
			return caller{}, http.StatusUnauthorized, "the token was issued before the account's password changed or it logged out: log in again at POST " + Prefix + "/token"
		}
		return caller{accountID: cl.Gen, account: name, via: "token", cred: cl.Cred}, 0, ""
	}
}

// refused logs and audits a refused token, at most once a minute per address and reason.
func (a *API) refused(r *http.Request, ip netip.Addr, device, why string) {
	ok, n := a.gate.Allow(ip.String() + "\x00" + why)
	if !ok {
		return
	}
	a.log.Warn("telemetry request refused", "event", EventAuthRefused, "device", device, "reason", why, "remote", ip.String(), "similar_suppressed", n)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := a.reg.AddEvent(ctx, registry.Event{Device: device, Kind: EventAuthRefused, Detail: why, Remote: ip.String()}); err != nil {
		a.log.Error("recording a refused token failed", "err", err)
	}
}

type tokenPair struct {
	AccessToken  string `json:"accessToken"`
	RefreshToken string `json:"refreshToken,omitempty"`
}

// decode reads a JSON body of at most MaxBody bytes into v.
func (a *API) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength > int64(a.cfg.MaxBody) {
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", a.cfg.MaxBody))
		return false
	}
	body := http.MaxBytesReader(w, r.Body, int64(a.cfg.MaxBody))
	if err := decodeJSON(body, v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", a.cfg.MaxBody))
			return false
		}
		fail(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// login is POST /token: a device name and its secret, or an account and its password.
func (a *API) login(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Login    string `json:"login"`
		Password string `json:"password"`
	}
	if !a.decode(w, r, &in) {
		return
	}
	if in.Login == "" || in.Password == "" {
		fail(w, http.StatusBadRequest, "give login (a device or account name) and password (its secret)")
		return
	}
	if st, res := a.dir.Load().CheckSecret(in.Login, in.Password); res != devicedir.NoSecret {
		if res != devicedir.SecretOK {
			fail(w, http.StatusUnauthorized, "wrong login or password")
			return
		}
		if st.Revoked {
			fail(w, http.StatusUnauthorized, fmt.Sprintf("device %s is revoked", st.Name))
			return
		}
		a.issuePair(w, authn.KindDevice, st.Name, st.Gen(), 0)
		return
	}
	acc := a.accountsOrNil()
	if acc == nil {
		fail(w, http.StatusUnauthorized, "wrong login or password")
		return
	}
	p, err := acc.Password(r.Context(), remoteAddr(r).String(), in.Login, in.Password)
	if err != nil {
		fail(w, http.StatusUnauthorized, err.Error())
		return
	}
	a.issuePair(w, authn.KindAccount, p.Name, p.ID, 0)
}

// credOf is the credential generation a new token of the subject carries.
func (a *API) credOf(kind, subject string, gen int64) string {
	if kind == authn.KindDevice {
		return a.dir.Load().Cred(subject)
	}
	if acc := a.accountsOrNil(); acc != nil {
		cred, _ := acc.Credential(gen)
		return cred
	}
	return ""
}

func (a *API) issuePair(w http.ResponseWriter, kind, subject string, gen int64, refreshTTL time.Duration) {
	cred := a.credOf(kind, subject, gen)
	acc, _, err := a.tokens.Issue(authn.Access, kind, subject, gen, cred, 0)
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	ref, _, err := a.tokens.Issue(authn.Refresh, kind, subject, gen, cred, refreshTTL)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, tokenPair{AccessToken: acc, RefreshToken: ref})
}

// refresh is POST /token/refresh.
func (a *API) refresh(w http.ResponseWriter, r *http.Request) {
	var in struct {
		RefreshToken string `json:"refreshToken"`
	}
	if !a.decode(w, r, &in) {
		return
	}
	if in.RefreshToken == "" {
		fail(w, http.StatusBadRequest, "give refreshToken")
		return
	}
	c, code, msg := a.fromJWT(r, remoteAddr(r), in.RefreshToken, authn.Refresh)
	if code != 0 {
		fail(w, code, msg)
		return
	}
	kind, subject, gen := authn.KindAccount, c.account, c.accountID
	if c.device != "" {
		kind, subject, gen = authn.KindDevice, c.device, deviceGen(a.dir.Load(), c.device)
	}
	tok, _, err := a.tokens.Issue(authn.Access, kind, subject, gen, a.credOf(kind, subject, gen), 0)
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, tokenPair{AccessToken: tok})
}

// createToken is POST /token/create: an account with +manage on a device issues that
// device's tokens (provisioning). DeviceHive's payload; deviceIds must name one device.
func (a *API) createToken(w http.ResponseWriter, r *http.Request, c caller) {
	if c.device != "" {
		fail(w, http.StatusForbidden, "devices cannot create tokens")
		return
	}
	var in struct {
		UserID     *int64   `json:"userId"`
		DeviceIDs  []string `json:"deviceIds"`
		Expiration string   `json:"expiration"`
	}
	if !a.decode(w, r, &in) {
		return
	}
	if len(in.DeviceIDs) == 0 && in.UserID != nil {
		a.createAccountToken(w, r, c, *in.UserID, in.Expiration)
		return
	}
	if len(in.DeviceIDs) != 1 {
		fail(w, http.StatusBadRequest, "deviceIds must name exactly one device: tokens are issued for one device")
		return
	}
	dev := in.DeviceIDs[0]
	st, ok := a.dir.Load().Device(dev)
	if !ok || !a.hub.Policy().VisibleToAccount(c.accountID, dev) {
		fail(w, http.StatusNotFound, fmt.Sprintf("device %s not found", trim(dev)))
		return
	}
	if !a.hub.Policy().AllowedAccount(c.accountID, dev, registry.RightManage) {
		fail(w, http.StatusForbidden, fmt.Sprintf("account %s may not create tokens for %s (it needs the +manage right)", c.account, dev))
		return
	}
	if st.Revoked {
		fail(w, http.StatusForbidden, fmt.Sprintf("device %s is revoked", dev))
		return
	}
	ttl, ok := expirationTTL(w, in.Expiration)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.reg.AddEvent(ctx, registry.Event{Device: dev, Kind: registry.EventTokenIssued, Detail: "refresh token issued to account " + c.account + " over REST", Remote: remoteAddr(r).String()}); err != nil {
		fail(w, http.StatusServiceUnavailable, "could not record the token in the audit log; nothing issued")
		return
	}
	a.issuePair(w, authn.KindDevice, dev, st.Gen(), ttl)
}

// bodies are the buffers request bodies are read into: a notification's decoder would
// otherwise allocate its own state and buffer on every request.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody bounds the buffers kept for the next request.
const maxPooledBody = 64 << 10

// decodeJSON decodes exactly one JSON value. What v receives never refers to the buffer
// (json.Unmarshal copies strings and raw messages).
func decodeJSON(body io.Reader, v any) error {
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodies.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return fmt.Errorf("reading the body: %v", err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		return fmt.Errorf("malformed JSON body: %v", err)
	}
	return nil
}

// deviceGen is the device's incarnation (0 if unknown).
func deviceGen(s *devicedir.Snapshot, name string) int64 {
	st, _ := s.Device(name)
	return st.Gen()
}

// expirationTTL reads a token request's expiration (0: the default lifetime), or
// answers why not.
func expirationTTL(w http.ResponseWriter, expiration string) (time.Duration, bool) {
	if expiration == "" {
		return 0, true
	}
	exp, err := telemetry.ParseTime(expiration)
	if err != nil {
		fail(w, http.StatusBadRequest, "expiration: "+err.Error())
		return 0, false
	}
	ttl := time.Until(exp)
	if ttl <= 0 {
		fail(w, http.StatusBadRequest, "expiration is in the past")
		return 0, false
	}
	return ttl, true
}

// createAccountToken is POST /token/create with a userId, as DeviceHive's clients ask
// for a user's token (create_token(user_id)): an account gets a pair for itself, which
// reaches what its grants allow and nothing more; another account's tokens are the
// operator's to issue ('iotsafe account token NAME').
func (a *API) createAccountToken(w http.ResponseWriter, r *http.Request, c caller, userID int64, expiration string) {
	if userID != c.accountID {
		fail(w, http.StatusForbidden, fmt.Sprintf("account %s may create tokens for itself (userId %d) only; other accounts' are issued with 'iotsafe account token NAME'", c.account, c.accountID))
		return
	}
	ttl, ok := expirationTTL(w, expiration)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.reg.AddEvent(ctx, registry.Event{Kind: registry.EventTokenIssued, Detail: "refresh token issued to account " + c.account + " for itself over REST", Remote: remoteAddr(r).String()}); err != nil {
		fail(w, http.StatusServiceUnavailable, "could not record the token in the audit log; nothing issued")
		return
	}
	a.issuePair(w, authn.KindAccount, c.account, c.accountID, ttl)
}
