package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// The accounts and grants page: who may reach which device, and with which console
// role, as the grants say (the CLI's rights model; this page only shows and changes
// grants through the same change path). Only an admin of the whole fleet (+admin on
// @all) sees it.

type accountsView struct {
	Accounts []accountRow
	Others   []registry.Grant // local users' and groups' grants
	Rights   []string
}

type accountRow struct {
	registry.Account
	Grants []registry.Grant
}

// fleetAdmin reports whether the caller holds +admin on every device.
func (c *Console) fleetAdmin(cl caller) bool {
	return c.d.Policy().AllowedAccountAll(cl.ID, registry.RightAdmin)
}

func (c *Console) accounts(w http.ResponseWriter, r *http.Request, cl caller) {
	if !c.fleetAdmin(cl) {
		c.fail(w, http.StatusForbidden, "the accounts page needs +admin on @all")
		return
	}
	accts, err := c.d.Registry.Accounts(r.Context())
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	grants := c.d.Policy().Grants()
	av := &accountsView{Rights: registry.Rights}
	for _, a := range accts {
		row := accountRow{Account: *a}
		for _, g := range grants {
			if g.Kind == registry.PrincipalAccount && int64(g.XID) == a.ID {
				row.Grants = append(row.Grants, g)
			}
		}
		av.Accounts = append(av.Accounts, row)
	}
	for _, g := range grants {
		if g.Kind != registry.PrincipalAccount {
			av.Others = append(av.Others, g)
		}
	}
	p := c.base(cl, "Accounts and grants", "accounts")
	p.Accounts, p.Notice = av, r.URL.Query().Get("done")
	c.render(w, http.StatusOK, "accounts.html", p)
}

// grant adds or removes an account's grant (POST /console/grants/add|remove).
func (c *Console) grant(w http.ResponseWriter, r *http.Request, cl caller) {
	if !c.fleetAdmin(cl) {
		c.fail(w, http.StatusForbidden, "changing grants needs +admin on @all")
		return
	}
	g := registry.Grant{Kind: registry.PrincipalAccount, Name: strings.TrimSpace(r.PostFormValue("account")),
		Target: strings.TrimSpace(r.PostFormValue("target")), Alias: strings.TrimSpace(r.PostFormValue("what"))}
	var ch control.Change
	verb := ""
	switch r.PathValue("op") {
	case "add":
		ch, verb = control.AddGrant{Grant: g}, "granted"
	case "remove":
		ch, verb = control.RemoveGrant{Grant: g}, "ungranted"
	default:
		c.fail(w, http.StatusNotFound, "no such action")
		return
	}
	if g.Name == "" || g.Target == "" || g.Alias == "" {
		c.fail(w, http.StatusBadRequest, "a grant needs an account, a target (DEVICE, @GROUP or @all) and a service or right")
		return
	}
	// Taking away one's own last way in is refused: the console would lock its admin out.
	if verb == "ungranted" && g.Name == cl.Name && g.Target == registry.AllDevices && g.Alias == registry.RightAdmin {
		c.fail(w, http.StatusConflict, "you cannot remove your own +admin on @all here: another admin, or the CLI, can")
		return
	}
	if _, err := c.d.Apply(r.Context(), ch); err != nil {
		c.fail(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "registry: "))
		return
	}
	what := fmt.Sprintf("%s %s %s %s", verb, g.Name, g.Target, g.Alias)
	c.audit1(r.Context(), cl, "", what)
	http.Redirect(w, r, "/console/accounts?done="+url.QueryEscape(what), http.StatusSeeOther)
}
