package frontdoor

import (
	"errors"
	"net/http"
	"strings"

	"github.com/iotsafe/iotsafe/internal/authn"
)

// SessionCookie names the login page's session cookie.
const SessionCookie = "iotsafe_session"

// principal is an authenticated account as the front door sees it.
type principal struct {
	ID   int64
	Name string
	// viaHeader: the credentials came in the Authorization header, which is then not
	// passed on to the device (it is the front door's secret, not the device's).
	viaHeader bool
}

var errNoCredentials = errors.New("log in: HTTP Basic, a Bearer token, or the login page")

// fromHeader is an account authenticated by the Authorization header.
func fromHeader(p authn.Principal, err error) (principal, error) {
	return principal{ID: p.ID, Name: p.Name, viaHeader: err == nil}, err
}

// authenticate finds the caller of r: Authorization header first, then the session cookie.
func (s *Server) authenticate(r *http.Request, ip string) (principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, _ := strings.Cut(h, " ")
		switch strings.ToLower(scheme) {
		case "basic":
			name, pw, ok := r.BasicAuth()
			if !ok {
				return principal{}, authn.ErrBadCredentials
			}
			return fromHeader(s.accounts.Password(r.Context(), ip, name, pw))
		case "bearer":
			return fromHeader(s.accounts.Token(ip, strings.TrimSpace(cred)))
		}
		return principal{}, authn.ErrBadCredentials
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if p, ok := s.accounts.Session(c.Value); ok {
			return principal{ID: p.ID, Name: p.Name}, nil
		}
	}
	return principal{}, errNoCredentials
}
