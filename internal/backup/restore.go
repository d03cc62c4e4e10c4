package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/fileowner"
)

// ErrIncomplete means a folder is not a whole backup: no manifest (cut short, or not a
// backup), or a file missing or changed since it was written.
var ErrIncomplete = errors.New("backup: not a complete backup")

// Verify reads dir's manifest and checks every file it lists: present, of its size and
// SHA-256.
func Verify(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s (a backup cut short, or not a backup folder)", ErrIncomplete, dir, ManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	m, err := parseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, dir)
	}
	// iotsafe backup writes folders and regular files only: a link could point a
	// restore at any file of this machine.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file (%s); iotsafe backup writes none such", ErrIncomplete, path, d.Type())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		n, h, err := sum(filepath.Join(dir, filepath.FromSlash(f.Path)))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %s: %v", ErrIncomplete, f.Path, err)
		case n != f.Size || h != f.SHA256:
			return nil, fmt.Errorf("%w: %s changed since the backup was written (%d bytes, the manifest says %d)", ErrIncomplete, f.Path, n, f.Size)
		}
	}
	return m, nil
}

// parseManifest reads a manifest, refusing one of another format or one that names a
// file outside the data folder (a backup folder is input that someone could have
// edited).
func parseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("backup: %s: %w", ManifestName, err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("backup: the backup is of format %q; this iotsafe reads %q", m.Format, Format)
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if err := checkPath(f.Path); err != nil {
			return nil, err
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("backup: the manifest lists %s twice", f.Path)
		}
		seen[f.Path] = true
		if f.Mode&^0o777 != 0 {
			return nil, fmt.Errorf("backup: the manifest gives %s mode %v, not permission bits", f.Path, f.Mode)
		}
	}
	return &m, nil
}

// checkPath refuses a manifest path that would leave the data folder.
func checkPath(p string) error {
	if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || p == ManifestName {
		return fmt.Errorf("backup: the manifest names %q, not a file of a data folder", p)
	}
	return nil
}

// RestoreOptions of Restore.
type RestoreOptions struct {
	// Lock is the data folder's lock file name: the caller holds it, and it stays.
	Lock string
	// Force replaces a data folder that holds anything: its entries are moved aside
	// first, into a sibling folder DATA.replaced-TIME.
	Force bool
	// Progress, if set, hears each step.
	Progress func(format string, args ...any)
	// Accept, if set, may refuse the verified backup before anything is touched.
	Accept func(*Manifest) error
}

// Restored says what Restore did.
type Restored struct {
	Manifest *Manifest
	// Aside is where the data folder's former entries went ("" if it had none).
	Aside string
}

// Restore checks the backup in dir whole, then puts its files into dataDir, whose lock
// the caller holds (no hub may run on it).
func Restore(dir, dataDir string, o RestoreOptions) (*Restored, error) {
	m, err := Verify(dir)
	if err != nil {
		return nil, err
	}
	if o.Accept != nil {
		if err := o.Accept(m); err != nil {
			return nil, err
		}
	}
	for _, f := range m.Files {
		if f.Path == o.Lock {
			return nil, fmt.Errorf("backup: the manifest names the data folder's lock %s, which no backup holds", f.Path)
		}
	}
	absData, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	if absDir, err := filepath.Abs(dir); err == nil {
		if r, err := filepath.Rel(absData, absDir); err == nil && !outside(r) {
			return nil, fmt.Errorf("backup: the backup %s is inside the data folder %s, which the restore replaces: move it out first", dir, dataDir)
		}
	}
	say := func(format string, args ...any) {
		if o.Progress != nil {
			o.Progress(format, args...)
		}
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	var present []string
	for _, e := range entries {
		if e.Name() != o.Lock {
			present = append(present, e.Name())
		}
	}
	r := &Restored{Manifest: m}
	if len(present) > 0 {
		if !o.Force {
			return nil, fmt.Errorf("backup: the data folder %s is not empty (%s): to replace it, give --force; what it holds is then moved to %s.replaced-TIME first",
				dataDir, list(present, 5), filepath.Base(dataDir))
		}
		r.Aside = absData + ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Mkdir(r.Aside, 0o700); err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		for _, name := range present {
			if err := os.Rename(filepath.Join(dataDir, name), filepath.Join(r.Aside, name)); err != nil {
				return nil, fmt.Errorf("backup: moving %s aside into %s (what was moved is there; the rest is still in place): %w", name, r.Aside, err)
			}
		}
		say("moved     what the data folder held to %s", r.Aside)
	}
	own, err := fileowner.Of(dataDir)
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		dst := filepath.Join(dataDir, filepath.FromSlash(f.Path))
		if err := mkdirs(dataDir, filepath.Dir(f.Path), own); err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		if err := restoreFile(filepath.Join(dir, filepath.FromSlash(f.Path)), dst, f, own); err != nil {
			return nil, fmt.Errorf("backup: restoring %s: %w", f.Path, err)
		}
		say("restored  %s", f.Path)
	}
	return r, syncDir(dataDir)
}

// mkdirs makes the folders of rel (slash-separated, "." for none) under root, 0700 and
// given to own.
func mkdirs(root, rel string, own *fileowner.Owner) error {
	if rel == "." {
		return nil
	}
	p := root
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		err := os.Mkdir(p, 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := own.Chown(p); err != nil {
			return err
		}
	}
	return nil
}

// restoreFile copies src to dst through a temporary file, checking the sum on the way,
// and renames it into place.
func restoreFile(src, dst string, f File, own *fileowner.Owner) error {
	tmp := dst + ".restoring"
	if err := copyFile(src, tmp, f.Mode); err != nil {
		os.Remove(tmp)
		return err
	}
	if n, h, err := sum(tmp); err != nil || n != f.Size || h != f.SHA256 {
		os.Remove(tmp)
		if err == nil {
			err = errors.New("the copy does not match the manifest")
		}
		return err
	}
	if err := os.Chmod(tmp, f.Mode); err != nil { // the umask may have narrowed it
		os.Remove(tmp)
		return err
	}
	if err := own.Chown(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

func list(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:max], ", ") + fmt.Sprintf(" and %d more", len(names)-max)
}
