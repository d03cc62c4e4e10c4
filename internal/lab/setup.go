package lab

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// Setup prepares one run of an experiment: it removes what killed runs left behind
// (saying so on w), finds the iotsafe binary the lab starts as peers, and makes a scratch
// folder (the caller removes it) and a progress reporter on w.
func Setup(w io.Writer) (bin, scratch string, p *Progress, err error) {
	if bin, err = os.Executable(); err != nil {
		return "", "", nil, err
	}
	SweepStale(w)
	if scratch, err = NewScratch(); err != nil {
		return "", "", nil, err
	}
	f, isFile := w.(*os.File)
	return bin, scratch, &Progress{W: w, TTY: isFile && term.IsTerminal(int(f.Fd()))}, nil
}

// SweepStale removes the network namespaces and scratch folders of lab runs that were
// killed before they could clean up, and says so on w.
func SweepStale(w io.Writer) {
	netns, err := SweepStaleNetns()
	for _, ns := range netns {
		fmt.Fprintf(w, "removed network namespace %s: the lab run that made it is gone\n", ns)
	}
	if err != nil {
		fmt.Fprintf(w, "warning: %v\n", err)
	}
	dirs, err := SweepStaleScratch()
	for _, d := range dirs {
		fmt.Fprintf(w, "removed scratch folder %s: the lab run that made it is gone\n", d)
	}
	if err != nil {
		fmt.Fprintf(w, "warning: %v\n", err)
	}
}
