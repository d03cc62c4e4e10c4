package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/iotsafe/iotsafe/internal/accessnote"
	"github.com/iotsafe/iotsafe/internal/authn"
)

// portal serves DOMAIN itself: the login page, logout, and the list of the caller's devices.
func (s *Server) portal(w http.ResponseWriter, r *http.Request) {
	if h := s.mounted(r); h != nil {
		ctx, note := accessnote.With(r.Context())
		if e, ok := r.Context().Value(accessKey{}).(*accessEntry); ok {
			e.note = note
		}
		h.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	switch {
	case r.URL.Path == "/login" && r.Method == http.MethodGet:
		s.loginPage(w, r, "")
	case r.URL.Path == "/login" && r.Method == http.MethodPost:
		s.login(w, r)
	case r.URL.Path == "/logout" && r.Method == http.MethodPost:
		s.logout(w, r)
	case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		s.deviceList(w, r)
	case r.URL.Path == "/login" || r.URL.Path == "/logout" || r.URL.Path == "/":
		w.Header().Set("Allow", "GET, POST")
		s.fail(w, r, http.StatusMethodNotAllowed, "method not allowed here")
	default:
		s.fail(w, r, http.StatusNotFound, "no such page")
	}
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>iotsafe — {{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em}
input{display:block;margin:.3em 0 1em;padding:.4em;width:100%;box-sizing:border-box}
.err{color:#a00}table{border-collapse:collapse;width:100%}td,th{padding:.3em;text-align:left;border-bottom:1px solid #ddd}</style>
</head><body><h1>{{.Title}}</h1>
{{if .Error}}<p class="err">{{.Error}}</p>{{end}}
{{if .Login}}<form method="post" action="/login">
<label>Account <input name="user" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<input type="hidden" name="next" value="{{.Next}}"><button type="submit">Log in</button></form>
{{else}}<p>Logged in as <b>{{.User}}</b>.</p>
<table><tr><th>device</th><th>state</th><th>services</th></tr>
{{range .Devices}}<tr><td>{{.Name}}</td><td>{{if .Online}}online{{else}}offline{{end}}</td>
<td>{{range .Services}}<a href="{{.URL}}">{{.Alias}}</a> {{end}}</td></tr>
{{else}}<tr><td colspan="3">No device has been shared with this account yet.</td></tr>{{end}}</table>
<form method="post" action="/logout"><button type="submit">Log out</button></form>{{end}}
</body></html>`))

type pageData struct {
	Title, Error, Next, User string
	Login                    bool
	Devices                  []deviceView
}

type deviceView struct {
	Name     string        `json:"name"`
	Online   bool          `json:"online"`
	Services []serviceView `json:"services"`
}

type serviceView struct {
	Alias string `json:"alias"`
	URL   string `json:"url"`
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, msg string) {
	next := r.FormValue("next")
	if !s.safeNext(next) {
		next = ""
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if msg != "" {
		w.WriteHeader(http.StatusUnauthorized)
	}
	pageTmpl.Execute(w, pageData{Title: "Log in", Error: msg, Next: next, Login: true})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	// A cross-site form must not log a victim into the attacker's account.
	if o := r.Header.Get("Origin"); o != "" && o != "null" && !s.sameOrigin(o, r) {
		s.fail(w, r, http.StatusForbidden, "login form posted from another site")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, http.StatusBadRequest, "malformed login form")
		return
	}
	name := r.PostFormValue("user")
	entry, _ := r.Context().Value(accessKey{}).(*accessEntry)
	if entry != nil {
		entry.user = s.accounts.LogName(name)
	}
	who, err := s.accounts.Password(r.Context(), clientIP(r), name, r.PostFormValue("password"))
	switch {
	case errors.Is(err, authn.ErrTooMany):
		w.Header().Set("Retry-After", s.retryAfter())
		w.WriteHeader(http.StatusTooManyRequests)
		pageTmpl.Execute(w, pageData{Title: "Log in", Error: err.Error(), Login: true})
		return
	case err != nil:
		if entry != nil {
			entry.reason = err.Error()
		}
		s.loginPage(w, r, err.Error())
		return
	}
	id, err := s.accounts.NewSession(r.Context(), who.ID)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Domain: s.cfg.Domain, Path: "/",
		MaxAge: int(s.cfg.SessionTTL.Seconds()), Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	next := r.PostFormValue("next")
	if !s.safeNext(next) {
		next = "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && !s.sameOrigin(o, r) {
		s.fail(w, r, http.StatusForbidden, "logout posted from another site")
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if err := s.accounts.EndSession(r.Context(), c.Value); err != nil {
			s.log.Error("logout: the session could not be removed from the registry; it ends here until the front door reloads", "err", err)
			s.fail(w, r, http.StatusServiceUnavailable, "logout could not be recorded: try again")
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Domain: s.cfg.Domain, Path: "/", MaxAge: -1,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// deviceList shows the devices shared with the caller (JSON for API clients).
func (s *Server) deviceList(w http.ResponseWriter, r *http.Request) {
	who, err := s.authenticate(r, clientIP(r))
	if err != nil {
		if errors.Is(err, errNoCredentials) && !strings.Contains(r.Header.Get("Accept"), "application/json") {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		s.authFailed(w, r, err)
		return
	}
	if e, ok := r.Context().Value(accessKey{}).(*accessEntry); ok {
		e.user = who.Name
	}
	views, err := s.visibleDevices(r.Context(), who, r.Host)
	if err != nil {
		s.log.Error("listing devices failed", "err", err)
		s.fail(w, r, http.StatusInternalServerError, "the hub could not list devices; see its log")
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"account": who.Name, "devices": views})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	pageTmpl.Execute(w, pageData{Title: "Your devices", User: who.Name, Devices: views})
}

func (s *Server) visibleDevices(ctx context.Context, who principal, host string) ([]deviceView, error) {
	devs, err := s.reg.Devices(ctx)
	if err != nil {
		return nil, err
	}
	pol := s.access.Policy()
	port := ""
	if _, p, err := net.SplitHostPort(host); err == nil {
		port = ":" + p
	}
	views := []deviceView{}
	for _, d := range devs {
		if !pol.VisibleToAccount(who.ID, d.Name) || d.Revoked() {
			continue
		}
		v := deviceView{Name: d.Name, Online: s.sessions.Online(d.Name), Services: []serviceView{}}
		for _, sock := range d.Sockets {
			if pol.AllowedAccount(who.ID, d.Name, sock.Alias) {
				v.Services = append(v.Services, serviceView{Alias: sock.Alias,
					URL: "https://" + sock.Alias + "." + d.Name + "." + s.cfg.Domain + port + "/"})
			}
		}
		views = append(views, v)
	}
	return views, nil
}

// portalURL is an absolute URL on the portal host, keeping the port the client used.
func (s *Server) portalURL(r *http.Request, path string) string {
	port := ""
	if _, p, err := net.SplitHostPort(r.Host); err == nil {
		port = ":" + p
	}
	return "https://" + s.cfg.Domain + port + path
}

// safeNext accepts only redirects back into the front door (no open redirect).
func (s *Server) safeNext(next string) bool {
	if next == "" {
		return false
	}
	// Browsers drop tabs and newlines anywhere in a URL, trim control characters and
	// spaces, and read a backslash as a slash: "/\t/evil.com" is "//evil.com" to them. Such
	// characters never belong in a front-door path, so refuse them outright.
	if strings.ContainsFunc(next, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '\\' }) {
		return false
	}
	if strings.HasPrefix(next, "/") && !strings.HasPrefix(next, "//") {
		return true
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "https" || u.User != nil {
		return false
	}
	_, err = ParseHost(u.Host, s.cfg.Domain)
	return err == nil
}

func (s *Server) sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "https" && strings.EqualFold(u.Host, r.Host)
}
