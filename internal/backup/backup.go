package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"

	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// ManifestName is the manifest in a backup folder; Format is its format.
const (
	ManifestName = "backup.json"
	Format       = "iotsafe-backup/1"
)

// Ways a file is copied (File.How).
const (
	HowCopy   = "copy"   // byte for byte
	HowSQLite = "sqlite" // a snapshot of an SQLite database (VACUUM INTO)
	HowBbolt  = "bbolt"  // a snapshot of a bbolt file (read transaction)
)

// Manifest describes a backup folder.
type Manifest struct {
	Format  string    `json:"format"`
	Created time.Time `json:"created"`
	Version string    `json:"iotsafe_version"`
	DataDir string    `json:"data_dir"`
	Files   []File    `json:"files"`
	LeftOut []LeftOut `json:"left_out,omitempty"`
	// Database is where the registry and the notifications are when they are not in the
	// data folder (a PostgreSQL DSN, its password removed): not in this backup.
	Database string `json:"database,omitempty"`
}

// File is one file of the backup.
type File struct {
	Path string      `json:"path"` // relative to the data folder, slash-separated
	Mode fs.FileMode `json:"mode"` // permission bits
	Size int64       `json:"size"`
	// SHA256 of the backup's copy, hex.
	SHA256 string `json:"sha256"`
	How    string `json:"how"`
	// SchemaVersion of an SQLite snapshot (its schema_migrations), 0 if it has none.
	SchemaVersion int `json:"schema_version,omitempty"`
}

// LeftOut is a data folder entry the backup does not hold, and why.
type LeftOut struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// Options of Take.
type Options struct {
	// Version is the iotsafe version recorded in the manifest.
	Version string
	// Database, if set, is where the registry is (redacted DSN), recorded in the manifest.
	Database string
	// Lock is the data folder's lock file name (left out).
	Lock string
	// Skip are more files to leave out (slash-separated, relative to the data folder),
	// each with the reason the manifest records: a running hub's ready file describes
	// that process, and a restored copy would describe one that is gone.
	Skip map[string]string
	// Progress, if set, hears each step.
	Progress func(format string, args ...any)
	// BboltWait bounds the wait for a bbolt file a running hub holds; 0 means 200ms.
	BboltWait time.Duration
	// KeepFree is the space (bytes) a backup into the data folder's own filesystem
	// leaves free there (the hub's audit.min_free_mib): a backup must not fill the disk
	// the running hub writes to.
	KeepFree int64
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(format, args...)
	}
}

// Take copies the data folder dataDir into dir, a new or empty folder outside it, and
// writes the manifest last. The hub may be running.
func Take(ctx context.Context, dataDir, dir string, o Options) (*Manifest, error) {
	if o.BboltWait == 0 {
		o.BboltWait = 200 * time.Millisecond
	}
	absData, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(absData); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("backup: the data folder %s: %w", dataDir, orNotDir(err))
	}
	if err := newFolder(absData, dir); err != nil {
		return nil, err
	}
	m := &Manifest{Format: Format, Created: time.Now().UTC(), Version: o.Version, DataDir: absData, Database: o.Database}
	err = filepath.WalkDir(absData, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(absData, path)
		if rel == "." {
			return nil
		}
		slashed := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return os.Mkdir(filepath.Join(dir, rel), 0o700)
		case d.Type()&fs.ModeSocket != 0:
			return nil // a running hub's admin or resolver socket
		case !d.Type().IsRegular():
			m.LeftOut = append(m.LeftOut, LeftOut{slashed, "not a regular file (" + d.Type().String() + ")"})
			return nil
		case rel == o.Lock || isJournal(rel):
			return nil // the lock; SQLite's WAL and journal files are in their snapshots
		case o.Skip[slashed] != "":
			m.LeftOut = append(m.LeftOut, LeftOut{slashed, o.Skip[slashed]})
			return nil
		}
		if info, err := d.Info(); err == nil && info.Size() >= 64<<20 {
			o.say("copying %s (%s)...", slashed, bytesize.Format(info.Size()))
		}
		f, err := copyOne(ctx, path, filepath.Join(dir, rel), o)
		if errors.Is(err, errHeld) {
			m.LeftOut = append(m.LeftOut, LeftOut{slashed, "held by the running hub (a bbolt file: the MQTT broker's sessions or the bridge's queue); stop the hub to include it"})
			o.say("left out %s: held by the running hub", slashed)
			return nil
		}
		if err != nil {
			return fmt.Errorf("backup: %s: %w", slashed, err)
		}
		f.Path = slashed
		m.Files = append(m.Files, f)
		o.say("%-7s %s (%s)", f.How, slashed, bytesize.Format(f.Size))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := writeManifest(dir, m); err != nil {
		return nil, err
	}
	return m, nil
}

// newFolder makes dir (0700) unless it exists empty; it must not be inside the data
// folder, nor hold it.
func newFolder(absData, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if r, err := filepath.Rel(absData, abs); err == nil && (r == "." || !outside(r)) {
		return fmt.Errorf("backup: %s is inside the data folder %s: give a folder outside it", dir, absData)
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(abs, 0o700)
	case err != nil:
		return fmt.Errorf("backup: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("backup: %s is not empty: give a new folder for each backup", dir)
	}
	return os.Chmod(abs, 0o700)
}

// outside reports whether a path relative to a folder (filepath.Rel's) leaves it:
// "../x" does, "..x" (a name) does not.
func outside(rel string) bool {
	return rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func orNotDir(err error) error {
	if err == nil {
		return errors.New("not a folder")
	}
	return err
}

// isJournal: SQLite's companions of a database file.
func isJournal(name string) bool {
	for _, s := range []string{"-wal", "-shm", "-journal"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

var errHeld = errors.New("held by another process")

// copyOne copies src to dst by the way its content calls for, and sums the copy.
func copyOne(ctx context.Context, src, dst string, o Options) (File, error) {
	st, err := os.Stat(src)
	if err != nil {
		return File{}, err
	}
	if err := roomFor(src, filepath.Dir(dst), st.Size(), o.KeepFree); err != nil {
		return File{}, err
	}
	f := File{Mode: st.Mode().Perm(), How: HowCopy}
	switch kind, err := sniff(src); {
	case err != nil:
		return File{}, err
	case kind == HowSQLite:
		f.How = HowSQLite
		if f.SchemaVersion, err = SnapshotSQLite(ctx, src, dst); err != nil {
			return File{}, err
		}
		if err := os.Chmod(dst, f.Mode); err != nil {
			return File{}, err
		}
	case kind == HowBbolt:
		f.How = HowBbolt
		if err := snapshotBbolt(src, dst, f.Mode, o.BboltWait); err != nil {
			return File{}, err
		}
	default:
		if err := copyFile(src, dst, f.Mode); err != nil {
			return File{}, err
		}
	}
	f.Size, f.SHA256, err = sum(dst)
	return f, err
}

// roomFor refuses a copy of n bytes into dir that would not fit, or that would leave
// less than keep free on the filesystem of src (the data folder's) when dir is on it.
// A snapshot is at most its database's size.
func roomFor(src, dir string, n, keep int64) error {
	var to, from unix.Statfs_t
	if unix.Statfs(dir, &to) != nil || unix.Statfs(src, &from) != nil {
		return nil // cannot tell; the write itself will say
	}
	free := int64(to.Bavail) * to.Bsize
	if to.Fsid != from.Fsid {
		keep = 0
	}
	if free-n < keep {
		return fmt.Errorf("not enough space in %s: %s to copy, %s free, and the data folder's filesystem keeps %s (audit.min_free_mib); back up onto another disk",
			dir, bytesize.Format(n), bytesize.Format(free), bytesize.Format(keep))
	}
	return nil
}

// sniff tells an SQLite database or a bbolt file by its first bytes.
func sniff(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	head := make([]byte, 32)
	n, _ := io.ReadFull(fh, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("SQLite format 3\x00")):
		return HowSQLite, nil
	// bbolt's first meta page: a 16-byte page header, then its magic number.
	case len(head) >= 20 && binary.LittleEndian.Uint32(head[16:20]) == 0xED0CDAED:
		return HowBbolt, nil
	}
	return HowCopy, nil
}

// SnapshotSQLite writes a consistent copy of the database at src to dst and returns its
// schema version.
func SnapshotSQLite(ctx context.Context, src, dst string) (int, error) {
	db, err := sqldb.OpenSQLite(src, "busy_timeout(10000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	snap, err := sqldb.OpenSQLite(dst)
	if err != nil {
		return 0, err
	}
	defer snap.Close()
	var tables int
	if err := snap.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, migrate.Table).Scan(&tables); err != nil || tables == 0 {
		return 0, err
	}
	return migrate.Version(ctx, snap, migrate.Table)
}

// snapshotBbolt copies a bbolt file in one read transaction; errHeld if a running hub
// holds it.
func snapshotBbolt(src, dst string, mode fs.FileMode, wait time.Duration) error {
	db, err := bbolt.Open(src, 0o600, &bbolt.Options{ReadOnly: true, Timeout: wait})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return errHeld
	}
	if err != nil {
		return err
	}
	defer db.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	err = db.View(func(tx *bbolt.Tx) error { _, err := tx.WriteTo(out); return err })
	return closeSynced(out, err)
}

// copyFile copies src to a new file dst with mode, synced.
func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return closeSynced(out, err)
}

func closeSynced(f *os.File, err error) error {
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sum is a file's size and SHA-256.
func sum(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return n, hex.EncodeToString(h.Sum(nil)), err
}

// writeManifest writes the manifest (0600) by rename, then syncs the folder: a backup
// with a manifest is complete.
func writeManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestName+".tmp")
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("backup: manifest: %w", err)
	}
	_, err = out.Write(append(b, '\n'))
	if err := closeSynced(out, err); err != nil {
		return fmt.Errorf("backup: manifest: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestName)); err != nil {
		return fmt.Errorf("backup: manifest: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
