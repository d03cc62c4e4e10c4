package pgscratch

import (
	"os"
	"sync"
	"testing"
)

// Twice runs a package's tests on SQLite and then, if they passed, again on PostgreSQL,
// so code written for both databases keeps one behaviour; the package's TestMain calls
// it. During the second pass OnPostgres is true and Location hands out databases.
func Twice(m *testing.M) {
	code := m.Run()
	if code == 0 {
		onPostgres = true
		code = m.Run()
	}
	CloseShared()
	os.Exit(code)
}

// onPostgres is set for Twice's second pass.
var onPostgres bool

// OnPostgres reports whether Twice is in its PostgreSQL pass.
func OnPostgres() bool { return onPostgres }

var databases = struct {
	sync.Mutex
	byDir map[string]string
}{byDir: map[string]string{}}

// Location is where a test keeps what it would keep in the folder dir: dir itself on
// SQLite; in the PostgreSQL pass a database of its own on the shared server, the same
// each time the test asks for that folder (a reopened store finds its data).
func Location(t testing.TB, dir string) string {
	t.Helper()
	if !onPostgres {
		return dir
	}
	databases.Lock()
	defer databases.Unlock()
	dsn, ok := databases.byDir[dir]
	if !ok {
		dsn = Shared(t).Database(t)
		databases.byDir[dir] = dsn
		t.Logf("on PostgreSQL: %s", dsn)
	}
	return dsn
}
