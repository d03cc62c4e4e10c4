package scan

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// TLSProfile is a configuration profile an endpoint is checked against: what it may
// accept. Mozilla's server-side TLS guidelines (v5.7) are what sslyze checks.
type TLSProfile struct {
	Name     string
	Versions []string
	Suites12 []string // OpenSSL names
	Groups   []string
}

// Profiles by name (scan --profile). X25519MLKEM768, the post-quantum hybrid, is allowed
// beside Mozilla's groups: it postdates v5.7 and is stronger than what the profiles list.
var Profiles = map[string]TLSProfile{
	"mozilla-intermediate": {
		Name:     "mozilla-intermediate",
		Versions: []string{"TLS 1.2", "TLS 1.3"},
		Suites12: []string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
			"ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305", "DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384", "DHE-RSA-CHACHA20-POLY1305"},
		Groups: []string{"X25519", "P-256", "P-384", "X25519MLKEM768"},
	},
	"mozilla-modern": {
		Name:     "mozilla-modern",
		Versions: []string{"TLS 1.3"},
		Groups:   []string{"X25519", "P-256", "P-384", "X25519MLKEM768"},
	},
}

// ProfileNames are the profiles' names, sorted.
func ProfileNames() []string {
	var out []string
	for n := range Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CheckProfile adds a finding per version, TLS 1.2 suite or group the endpoint accepts
// outside the profile (weak), or one saying it complies (good).
func CheckProfile(r *Report, p TLSProfile) {
	if r.Error != "" {
		return
	}
	var off []string
	for _, v := range r.Versions {
		if !slices.Contains(p.Versions, v) {
			off = append(off, v)
		}
	}
	for v, suites := range r.Suites {
		if v == "TLS 1.3" || !slices.Contains(p.Versions, v) {
			continue // TLS 1.3's suites are all allowed; a version off the profile is said once
		}
		for _, s := range suites {
			if !slices.Contains(p.Suites12, s) {
				off = append(off, v+" "+s)
			}
		}
	}
	for _, g := range r.Groups {
		if !slices.Contains(p.Groups, g) {
			off = append(off, "group "+g)
		}
	}
	if len(off) == 0 {
		r.add("profile", Good, "complies with %s (versions, TLS 1.2 suites, groups)", p.Name)
		return
	}
	slices.Sort(off)
	r.add("profile", Weak, "not in %s: %s", p.Name, strings.Join(slices.Compact(off), ", "))
}

// ProfileByName is the profile called name, or an error listing them.
func ProfileByName(name string) (TLSProfile, error) {
	p, ok := Profiles[name]
	if !ok {
		return p, fmt.Errorf("no profile %q: one of %s", name, strings.Join(ProfileNames(), ", "))
	}
	return p, nil
}
