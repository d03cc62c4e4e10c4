// Package pyenv finds programs in the project's Python virtual environment, where
// scripts/setup.sh installs the pinned Python peers the tests run (ssh-audit, the
// DeviceHive client, signxml and python-xmlsec).
package pyenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dir is the environment: $IOTSAFE_VENV, else $XDG_CACHE_HOME/iotsafe/venv (~/.cache by
// default), as scripts/setup.sh chooses it.
func Dir() string {
	if v := os.Getenv("IOTSAFE_VENV"); v != "" {
		return v
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "iotsafe", "venv")
}

// Tool is the path of bin/NAME in the environment, or an error saying how to get it.
func Tool(name string) (string, error) {
	p := filepath.Join(Dir(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found at %s: run scripts/setup.sh (make test does)", name, p)
	}
	return p, nil
}
