package console

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/iotsafe/iotsafe/internal/kexinit"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// The crypto posture: what the fleet negotiates with the hub right now, and a dry run
// of a change of the hub's algorithm policy ("if the hub stops offering X, these
// devices lose their session"), from what each device's client offered in its KEXINIT.

// Categories of algorithms a dry run can drop.
const (
	catKex     = "kex"
	catCipher  = "cipher"
	catMAC     = "mac"
	catHostKey = "hostkey"
)

var categories = []string{catKex, catCipher, catMAC, catHostKey}

// postureView is the crypto page.
type postureView struct {
	Online  int
	Tables  []countTable
	Policy  profile.CryptoPolicy
	Run     *dryRun
	Options map[string][]string // per category, what the hub offers now
}

type countTable struct {
	Title string
	Rows  []kv
}

// dryRun is what dropping one algorithm would do to the online devices.
type dryRun struct {
	Category, Algorithm string
	NotOffered          bool // the hub does not offer it now: nothing changes
	Lose                []string
	LoseTotal           int
	Change              []kv // devices that would negotiate another algorithm, by which
	Unknown             int  // devices whose offer was not recorded
	Kept                int
}

// aead ciphers carry their own integrity: a MAC is not negotiated for them.
func aead(cipher string) bool {
	return strings.Contains(cipher, "gcm") || strings.Contains(cipher, "chacha20-poly1305")
}

// offered is the hub's list of a category.
func offered(p profile.CryptoPolicy, cat string) []string {
	switch cat {
	case catKex:
		return p.KeyExchanges
	case catCipher:
		return p.Ciphers
	case catMAC:
		return p.MACs
	case catHostKey:
		return p.HostKeyAlgorithms
	}
	return nil
}

// clientList is what a client offered of a category.
func clientList(o *kexinit.Offer, cat string) []string {
	switch cat {
	case catKex:
		return o.KexAlgorithms()
	case catCipher:
		return o.CiphersC2S
	case catMAC:
		return o.MACsC2S
	case catHostKey:
		return o.HostKeys
	}
	return nil
}

// negotiated is what a session negotiated of a category.
func negotiated(a registry.Algorithms, cat string) string {
	switch cat {
	case catKex:
		return a.KeyExchange
	case catCipher:
		return a.Cipher
	case catMAC:
		return a.MAC
	case catHostKey:
		return a.HostKey
	}
	return ""
}

func (c *Console) crypto(w http.ResponseWriter, r *http.Request, cl caller) {
	ctx := r.Context()
	scope := c.scope(cl, registry.RightView)
	groups, err := c.d.Registry.OnlineAlgorithms(ctx, scope)
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	var pol profile.CryptoPolicy
	if c.d.Crypto != nil {
		pol = c.d.Crypto()
	}
	pol.ApplyDefaults()
	pv := &postureView{Policy: pol, Options: map[string][]string{}}
	for _, cat := range categories {
		pv.Options[cat] = offered(pol, cat)
	}
	counts := map[string]map[string]int{}
	algos := make([]registry.Algorithms, len(groups))
	var hashes []string
	for i, g := range groups {
		json.Unmarshal([]byte(g.Algos), &algos[i])
		pv.Online += g.Devices
		for title, v := range map[string]string{"Key exchanges": algos[i].KeyExchange, "Ciphers": algos[i].Cipher,
			"MACs": macShown(algos[i]), "Host keys": algos[i].HostKey, "Device keys": algos[i].KeyType, "Client versions": algos[i].Client} {
			if counts[title] == nil {
				counts[title] = map[string]int{}
			}
			counts[title][v] += g.Devices
		}
		if algos[i].Offer != "" && !slices.Contains(hashes, algos[i].Offer) {
			hashes = append(hashes, algos[i].Offer)
		}
	}
	for _, title := range []string{"Key exchanges", "Ciphers", "MACs", "Host keys", "Device keys", "Client versions"} {
		rows := sortedKV(counts[title])
		slices.SortStableFunc(rows, func(a, b kv) int { return b.V - a.V })
		pv.Tables = append(pv.Tables, countTable{Title: title, Rows: rows})
	}
	p := c.base(cl, "Crypto posture", "crypto")
	cat, alg := r.URL.Query().Get("category"), strings.TrimSpace(r.URL.Query().Get("algorithm"))
	if cat != "" || alg != "" {
		if !slices.Contains(categories, cat) || alg == "" {
			p.Error = "a dry run needs a category (kex, cipher, mac or hostkey) and an algorithm the hub offers"
		} else {
			raw, err := c.d.Registry.Offers(ctx, hashes)
			if err != nil {
				c.fail(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			offers := map[string]*kexinit.Offer{}
			for h, js := range raw {
				var o kexinit.Offer
				if json.Unmarshal([]byte(js), &o) == nil {
					offers[h] = &o
				}
			}
			run, lose := plan(pol, cat, alg, groups, algos, offers)
			if run.Lose, err = c.d.Registry.OnlineWithAlgorithms(ctx, scope, lose, 200); err != nil {
				c.fail(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			pv.Run = run
		}
	}
	p.Posture, p.Live = pv, "/console/live"
	c.render(w, http.StatusOK, "crypto.html", p)
}

func macShown(a registry.Algorithms) string {
	if a.MAC == "" && aead(a.Cipher) {
		return "(in the cipher)"
	}
	return a.MAC
}

// plan is the dry run of dropping alg from the hub's category cat: per group of online
// devices, the first algorithm of the client's list the hub would still offer is what
// it would negotiate; none means it loses its session. lose are the groups that would.
func plan(pol profile.CryptoPolicy, cat, alg string, groups []registry.AlgoGroup, algos []registry.Algorithms, offers map[string]*kexinit.Offer) (*dryRun, []string) {
	run := &dryRun{Category: cat, Algorithm: alg}
	hub := offered(pol, cat)
	if !slices.Contains(hub, alg) {
		run.NotOffered = true
		return run, nil
	}
	left := slices.DeleteFunc(slices.Clone(hub), func(a string) bool { return a == alg })
	change := map[string]int{}
	var lose []string
	for i, g := range groups {
		a := algos[i]
		if cat == catMAC && aead(a.Cipher) {
			run.Kept += g.Devices // its cipher needs no MAC
			continue
		}
		o := offers[a.Offer]
		if o == nil {
			run.Unknown += g.Devices
			continue
		}
		pick := ""
		for _, x := range clientList(o, cat) {
			if slices.Contains(left, x) {
				pick = x
				break
			}
		}
		switch {
		case pick == "":
			run.LoseTotal += g.Devices
			lose = append(lose, g.Algos)
		case pick != negotiated(a, cat):
			change[pick] += g.Devices
		default:
			run.Kept += g.Devices
		}
	}
	run.Change = sortedKV(change)
	return run, lose
}
