package deferrednil_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/iotsafe/iotsafe/internal/lint/deferrednil"
)

// The analyzer finds issue 56's mistake in its forms (func and interface results) and
// leaves alone what is safe (a nil check, a bare return, a direct defer, a nested
// closure's own returns).
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), deferrednil.Analyzer, "a")
}
