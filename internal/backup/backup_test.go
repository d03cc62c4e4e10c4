package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// dataFolder is a data folder as a hub leaves it: an SQLite database in WAL mode (real
// SQLite), a bbolt file, a key 0600 in a subfolder, a config 0644 and the lock.
func dataFolder(t *testing.T) (dir string, db *sqldb.DB) {
	t.Helper()
	dir = t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "registry.db"), nil, 0o600)) // as the registry makes it
	db, err := sqldb.OpenSQLite(filepath.Join(dir, "registry.db"), "busy_timeout(10000)", "journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)`, `INSERT INTO schema_migrations VALUES (1), (7)`,
		`CREATE TABLE rows (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`} {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	bolt, err := bbolt.Open(filepath.Join(dir, "mqtt.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket([]byte("sessions"))
		if err == nil {
			err = b.Put([]byte("dev1"), []byte("inflight"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bolt.Close()
	must(t, os.Mkdir(filepath.Join(dir, "frontdoor"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "frontdoor", "ca.key"), []byte("secret"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte("ssh: {}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "hub.lock"), []byte("123"), 0o600))
	return dir, db
}

// backUp takes a backup of data into a new folder and returns it.
func backUp(t *testing.T, data string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := Take(context.Background(), data, dir, Options{Lock: "hub.lock"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func rowCount(t *testing.T, path string) int {
	t.Helper()
	db, err := sqldb.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	var check string
	must(t, db.QueryRowContext(context.Background(), `PRAGMA integrity_check`).Scan(&check))
	if check != "ok" {
		t.Fatalf("%s: integrity check: %s", path, check)
	}
	must(t, db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM rows`).Scan(&n))
	return n
}

// A backup taken while a writer commits holds a consistent database with every row
// committed before it began, the other files with their modes, and a manifest that
// lists them; the lock and the WAL are not in it.
func TestTakeWhileWriting(t *testing.T) {
	data, db := dataFolder(t)
	ctx := context.Background()
	for i := range 100 {
		if _, err := db.ExecContext(ctx, `INSERT INTO rows(v) VALUES (?)`, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO rows(v) VALUES (?)`, "more"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	dir := filepath.Join(t.TempDir(), "b")
	m, err := Take(ctx, data, dir, Options{Version: "test", Lock: "hub.lock"})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, filepath.Join(dir, "registry.db")); n < 100 {
		t.Fatalf("the snapshot holds %d rows, want at least the 100 committed before", n)
	}
	byPath := map[string]File{}
	for _, f := range m.Files {
		byPath[f.Path] = f
	}
	if f := byPath["registry.db"]; f.How != HowSQLite || f.SchemaVersion != 7 {
		t.Errorf("registry.db in the manifest: %+v", f)
	}
	if f := byPath["mqtt.db"]; f.How != HowBbolt {
		t.Errorf("mqtt.db in the manifest: %+v", f)
	}
	for path, mode := range map[string]os.FileMode{"frontdoor/ca.key": 0o600, "hub.yaml": 0o644, "registry.db": 0o600, "mqtt.db": 0o600} {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(path)))
		if err != nil || st.Mode().Perm() != mode || byPath[path].Mode != mode {
			t.Errorf("%s: %v, mode %v, manifest %v; want %v", path, err, st.Mode().Perm(), byPath[path].Mode, mode)
		}
	}
	for _, gone := range []string{"hub.lock", "registry.db-wal", "registry.db-shm"} {
		if _, ok := byPath[gone]; ok {
			t.Errorf("%s is in the backup", gone)
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("backup folder: %v %v", err, st.Mode())
	}
	if _, err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	// The bbolt copy opens and holds the session.
	bolt, err := bbolt.Open(filepath.Join(dir, "mqtt.db"), 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	must(t, bolt.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket([]byte("sessions")).Get([]byte("dev1")); string(v) != "inflight" {
			return fmt.Errorf("the bbolt copy holds %q", v)
		}
		return nil
	}))
}

// A bbolt file a running process holds is left out, and said so; the rest is backed up.
func TestTakeLeavesOutAHeldBboltFile(t *testing.T) {
	data, _ := dataFolder(t)
	held, err := bbolt.Open(filepath.Join(data, "mqtt.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := filepath.Join(t.TempDir(), "b")
	m, err := Take(context.Background(), data, dir, Options{Lock: "hub.lock", BboltWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.LeftOut) != 1 || m.LeftOut[0].Path != "mqtt.db" || !strings.Contains(m.LeftOut[0].Why, "held by the running hub") {
		t.Fatalf("left out: %+v", m.LeftOut)
	}
	if len(m.Files) != 3 { // registry.db, hub.yaml, frontdoor/ca.key
		t.Fatalf("files: %+v", m.Files)
	}
}

// A backup goes into a new or empty folder outside the data folder, nowhere else.
func TestTakeRefusesItsTarget(t *testing.T) {
	data, _ := dataFolder(t)
	full := t.TempDir()
	must(t, os.WriteFile(filepath.Join(full, "x"), nil, 0o600))
	for target, want := range map[string]string{
		filepath.Join(data, "backup"): "inside the data folder",
		filepath.Join(data, "..b"):    "inside the data folder", // a name, not the parent
		data:                          "inside the data folder",
		full:                          "is not empty",
	} {
		if _, err := Take(context.Background(), data, target, Options{Lock: "hub.lock"}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("backup into %s: %v, want %q", target, err, want)
		}
	}
	if _, err := Take(context.Background(), filepath.Join(data, "nope"), t.TempDir(), Options{}); err == nil {
		t.Error("a backup of a missing data folder")
	}
}

// Restore puts every file back with its mode; a data folder that holds anything is
// replaced only when forced, and its entries are moved aside, not lost; the lock stays.
func TestRestore(t *testing.T) {
	data, _ := dataFolder(t)
	dir := backUp(t, data)
	target := filepath.Join(t.TempDir(), "data")
	must(t, os.Mkdir(target, 0o700))
	must(t, os.WriteFile(filepath.Join(target, "hub.lock"), []byte("me"), 0o600))
	if _, err := Restore(dir, target, RestoreOptions{Lock: "hub.lock"}); err != nil {
		t.Fatalf("into an empty folder (but the lock): %v", err)
	}
	if st, err := os.Stat(filepath.Join(target, "frontdoor", "ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("restored key: %v %v", err, st)
	}
	if n := rowCount(t, filepath.Join(target, "registry.db")); n != 0 {
		t.Fatalf("restored rows %d", n)
	}
	must(t, os.WriteFile(filepath.Join(target, "hub.yaml"), []byte("changed\n"), 0o644))
	if _, err := Restore(dir, target, RestoreOptions{Lock: "hub.lock"}); err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("over a data folder without --force: %v", err)
	}
	r, err := Restore(dir, target, RestoreOptions{Lock: "hub.lock", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Aside, "hub.yaml")); string(b) != "changed\n" {
		t.Fatalf("what the folder held is not in %s: %q", r.Aside, b)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "hub.yaml")); string(b) != "ssh: {}\n" {
		t.Fatalf("restored config: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "hub.lock")); string(b) != "me" {
		t.Fatalf("the lock was touched: %q", b)
	}
}

// A backup cut short (no manifest) or changed since (a file edited, removed) is refused
// whole, before the data folder is touched.
func TestVerifyRefusesIncompleteBackups(t *testing.T) {
	data, _ := dataFolder(t)
	for name, spoil := range map[string]func(dir string){
		"no manifest": func(dir string) { os.Remove(filepath.Join(dir, ManifestName)) },
		"changed": func(dir string) {
			os.WriteFile(filepath.Join(dir, "hub.yaml"), []byte("ssh: {listen: 0.0.0.0:22}\n"), 0o644)
		},
		"missing": func(dir string) { os.Remove(filepath.Join(dir, "frontdoor", "ca.key")) },
	} {
		dir := backUp(t, data)
		spoil(dir)
		target := t.TempDir()
		if _, err := Restore(dir, target, RestoreOptions{Force: true}); !errors.Is(err, ErrIncomplete) {
			t.Errorf("%s: %v, want ErrIncomplete", name, err)
		}
		if entries, _ := os.ReadDir(target); len(entries) != 0 {
			t.Errorf("%s: the data folder was touched: %v", name, entries)
		}
	}
}

// Whatever a manifest holds, what parseManifest accepts names files inside the data
// folder only, each once, with permission bits only.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":"iotsafe-backup/1","files":[{"path":"registry.db","mode":384,"size":1,"sha256":"00","how":"sqlite"},{"path":"frontdoor/ca.key","mode":384}]}`))
	f.Add([]byte(`{"format":"iotsafe-backup/1","files":[{"path":"../etc/passwd","mode":420}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseManifest(b)
		if err != nil {
			return
		}
		root := filepath.Join(string(filepath.Separator), "data")
		for _, file := range m.Files {
			p := filepath.Join(root, filepath.FromSlash(file.Path))
			if r, err := filepath.Rel(root, p); err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || file.Mode&^0o777 != 0 {
				t.Fatalf("accepted %q (mode %v): lands at %s", file.Path, file.Mode, p)
			}
		}
	})
}

// Restored as root into a data folder a service user owns, every file and folder is
// that user's: a hub that runs as it can read its keys.
func TestRestoreGivesFilesToTheDataFolderOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away (make test runs as root)")
	}
	data, _ := dataFolder(t)
	dir := backUp(t, data)
	target := filepath.Join(t.TempDir(), "data")
	must(t, os.Mkdir(target, 0o700))
	const nobody = 65534
	must(t, os.Chown(target, nobody, nobody))
	if _, err := Restore(dir, target, RestoreOptions{Lock: "hub.lock"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"frontdoor", "frontdoor/ca.key", "registry.db", "hub.yaml"} {
		st, err := os.Stat(filepath.Join(target, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != nobody || sys.Gid != nobody {
			t.Errorf("%s belongs to %d:%d, want the data folder's owner %d", p, sys.Uid, sys.Gid, nobody)
		}
	}
}

// A backup that would leave the data folder's filesystem with less than the hub keeps
// free stops with a clear error, and what it wrote is no backup (no manifest).
func TestTakeKeepsTheDataFolderDiskFree(t *testing.T) {
	data, _ := dataFolder(t)
	dir := filepath.Join(t.TempDir(), "b") // the same filesystem as the data folder
	_, err := Take(context.Background(), data, dir, Options{Lock: "hub.lock", KeepFree: 1 << 62})
	if err == nil || !strings.Contains(err.Error(), "not enough space") || !strings.Contains(err.Error(), "audit.min_free_mib") {
		t.Fatalf("a backup past the space the hub keeps: %v", err)
	}
	if _, err := Verify(dir); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("the cut-short backup: %v", err)
	}
}

// A backup folder holding a symbolic link (iotsafe backup writes none) is refused.
func TestVerifyRefusesLinks(t *testing.T) {
	data, _ := dataFolder(t)
	dir := backUp(t, data)
	must(t, os.Symlink("/etc/hostname", filepath.Join(dir, "extra")))
	if _, err := Verify(dir); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a backup with a link: %v", err)
	}
}

// A backup kept inside the data folder it would replace is refused before anything
// moves.
func TestRestoreRefusesABackupInsideTheDataFolder(t *testing.T) {
	data, _ := dataFolder(t)
	dir := backUp(t, data)
	target := t.TempDir()
	inside := filepath.Join(target, "backups", "b")
	must(t, os.MkdirAll(filepath.Dir(inside), 0o700))
	must(t, os.Rename(dir, inside))
	if _, err := Restore(inside, target, RestoreOptions{Force: true}); err == nil || !strings.Contains(err.Error(), "inside the data folder") {
		t.Fatalf("a backup inside the data folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(inside, ManifestName)); err != nil {
		t.Fatalf("the backup moved: %v", err)
	}
}
