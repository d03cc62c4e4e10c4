// Package atomicfile writes a file so that a reader sees the old content or the new,
// never half of it: through a temporary file in the same folder, synced, then renamed
// over the old one (or linked, to create it only if it does not exist).
package atomicfile

import (
	"os"
	"path/filepath"
)

// Options of Write. The zero value replaces the file with mode 0600.
type Options struct {
	// Mode of the new file; 0 means 0600.
	Mode os.FileMode
	// CreateOnly fails (wrapping os.ErrExist) when the file exists instead of replacing it.
	CreateOnly bool
}

// Write puts b at path.
func Write(path string, b []byte, o Options) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if o.Mode != 0 && o.Mode != 0o600 {
		if err := tmp.Chmod(o.Mode); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if o.CreateOnly {
		return os.Link(tmp.Name(), path)
	}
	return os.Rename(tmp.Name(), path)
}
