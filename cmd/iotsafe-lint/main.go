// Command iotsafe-lint runs the project's own static checks beside go vet and
// staticcheck ('make test' runs it on ./...): deferrednil (issue 56's crash: a named
// result returned as nil and called by a deferred closure) and x/tools' nilness (nil
// dereferences, nil func calls and impossible nil checks on the SSA form).
package main

import (
	"golang.org/x/tools/go/analysis/multichecker"
	"golang.org/x/tools/go/analysis/passes/nilness"

	"github.com/iotsafe/iotsafe/internal/lint/deferrednil"
)

func main() {
	multichecker.Main(deferrednil.Analyzer, nilness.Analyzer)
}
