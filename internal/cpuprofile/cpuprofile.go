// Package cpuprofile writes a process's CPU profile to a file (the hub's and the lab's
// --cpuprofile flag), so a path's whole cost can be read with 'go tool pprof'.
package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Start profiles the process into path until the returned stop is called.
func Start(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
