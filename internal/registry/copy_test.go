package registry

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// fill puts a row in every table of the registry.
func fill(t *testing.T, r *Registry) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.PutProfile(ctx, &profile.Profile{Name: "cam", Reverse: map[string]int{"http": 80, "rtsp": 554}}))
	for i := range 30 {
		_, err := r.AddDevice(ctx, fmt.Sprintf("cam%02d", i), "cam", newKey(t), "site-a", "network:plant-a")
		must(err)
	}
	must(r.RevokeDevice(ctx, "cam03", "stolen"))
	must(r.AddGrant(ctx, Grant{Kind: PrincipalUser, Name: "app", XID: 1000, Target: "cam01", Alias: "http"}))
	acc, err := r.AddAccount(ctx, "alice", "$argon2id$fake")
	must(err)
	exp := time.Now().Add(time.Hour)
	_, err = r.AddToken(ctx, "alice", "ci", "hash1", &exp)
	must(err)
	_, err = r.AddJoinToken(ctx, "join-hash", "batch", "cam", "cam-*", 10, exp, ApproveManual)
	must(err)
	must(r.AddLoginSession(ctx, LoginSession{Hash: "s1", AccountID: acc.ID, ExpiresAt: exp}))
	must(r.SetDeviceSecret(ctx, "cam01", "secrethash"))
	must(r.SetDeviceData(ctx, "cam01", []byte(`{"floor":2}`)))
	must(r.SetDeviceCert(ctx, "cam02", "0a1b", exp))
	must(r.SetSOAPKey(ctx, SOAPKey{Device: "cam04", KeyID: "k1", Secret: []byte{0, 1, 2, 255}}))
	must(r.NoteHostKeys(ctx, "cam04", HostKeyProven, []string{"SHA256:next"}))
	ca := newKey(t)
	_, err = r.TrustSSHCA(ctx, "factory", ca, "cam-*", "cam", ApproveManual)
	must(err)
	must(r.RecordSSHCert(ctx, ssh.FingerprintSHA256(ca), 7, "cam05", "cam05@factory", newKey(t), exp))
	must(r.RecordOffer(ctx, "0123456789abcdef", `{"kex":["curve25519-sha256"]}`))
}

// dump is every row of every table, as text, sorted: two registries holding the same
// data dump the same on either database.
func dump(t *testing.T, r *Registry) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	for _, tb := range tables {
		rows, err := r.db.QueryContext(ctx, `SELECT * FROM `+tb.name)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals, err := sqldb.ScanAny(rows, len(cols))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for i, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = fmt.Sprintf("%x", bs)
				}
				fmt.Fprintf(&b, "%s=%v;", cols[i], v)
			}
			out[tb.name] = append(out[tb.name], b.String())
		}
		rows.Close()
		sort.Strings(out[tb.name])
	}
	return out
}

func openAt(t *testing.T, location string, want sockets.Config) *Registry {
	t.Helper()
	r, err := Open(context.Background(), location, want)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A registry copied from SQLite to PostgreSQL and back holds every row of every table
// unchanged, keeps numbering its ids after the copied ones, and a copy into a database
// that holds data is refused with nothing written.
func TestCopyBetweenDatabases(t *testing.T) {
	ctx := context.Background()
	pool := sockets.Config{CIDR: "127.81.0.0/16", PortBase: 21000}
	src := openAt(t, t.TempDir(), pool)
	fill(t, src)
	pg := openAt(t, pgscratch.Shared(t).Database(t), sockets.Config{})
	var told []string
	counts, err := src.CopyTo(ctx, pg, func(c TableCount) { told = append(told, c.Table) })
	if err != nil {
		t.Fatal(err)
	}
	if len(told) != len(tables) || len(counts) != len(tables) {
		t.Fatalf("progress for %v, counts %v", told, counts)
	}
	for _, c := range counts {
		if c.Rows == 0 {
			t.Errorf("nothing copied of %s: fill misses it, or the copy did", c.Table)
		}
	}
	want := dump(t, src)
	if got := dump(t, pg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("PostgreSQL copy differs:\n got %v\nwant %v", got, want)
	}
	if pg.Pool().Config() != src.Pool().Config() {
		t.Fatalf("pool %+v, want %+v", pg.Pool().Config(), src.Pool().Config())
	}
	// Identities continue after the copied ids.
	id, err := pg.AddToken(ctx, "alice", "after", "hash2", nil)
	if err != nil || id != 2 {
		t.Fatalf("token after the copy: id %d, %v", id, err)
	}
	if err := pg.AddEvent(ctx, Event{Kind: "test", Detail: "after the copy"}); err != nil {
		t.Fatal(err)
	}
	d, err := pg.AddDevice(ctx, "late", "cam", newKey(t))
	if err != nil || !pg.Pool().Contains(d.Address) {
		t.Fatalf("device after the copy: %+v %v", d, err)
	}
	// And back, into a new folder.
	back := openAt(t, filepath.Join(t.TempDir()), sockets.Config{})
	if _, err := pg.CopyTo(ctx, back, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, back), dump(t, pg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("copy back differs:\n got %v\nwant %v", got, want)
	}
	// Not into a registry that holds data.
	before := dump(t, back)
	if _, err := src.CopyTo(ctx, back, nil); !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), "31 devices") {
		t.Fatalf("copy into a full registry: %v", err)
	}
	if fmt.Sprint(dump(t, back)) != fmt.Sprint(before) {
		t.Fatal("the refused copy changed the destination")
	}
}

// The list of tables a copy moves is every table of the schema.
func TestCopyCoversEveryTable(t *testing.T) {
	r := openAt(t, t.TempDir(), sockets.Config{})
	if r.Dialect() != sqldb.SQLite {
		t.Fatal("want SQLite")
	}
	rows, err := r.db.QueryContext(context.Background(), `SELECT name FROM sqlite_master WHERE type='table' AND name NOT IN ('schema_migrations', 'sqlite_sequence') ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	listed := map[string]bool{}
	for _, tb := range tables {
		listed[tb.name] = true
	}
	for rows.Next() {
		var name string
		rows.Scan(&name)
		if !listed[name] && !notCopied[name] {
			t.Errorf("table %s is not copied: add it to tables in copy.go", name)
		}
	}
}
