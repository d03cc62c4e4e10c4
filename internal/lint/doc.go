// Package lint holds the project's own static checks, for mistakes that go vet and
// staticcheck do not catch; cmd/iotsafe-lint runs them in 'make test'.
package lint
