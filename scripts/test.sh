#!/usr/bin/env bash
# Runs every check and test: formatting, vet, staticcheck, unit and end-to-end tests with
# the race detector, and a short fuzzing pass over every parser of untrusted input.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"
# The race runtime sleeps 1 s at every exit so other threads can finish their reports: a
# second per test binary and per CLI call of the e2e tests. Reports still print.
export GORACE="${GORACE:-} atexit_sleep_ms=0"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go mod tidy"
# go.mod must name what the code imports directly (not as "// indirect") and nothing more.
if ! tidy=$(go mod tidy -diff 2>&1); then
  echo "go.mod or go.sum is not tidy; run 'go mod tidy':"; echo "$tidy"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
staticcheck ./...

echo "== fuzz (short pass per target; seeds in testdata/ also run as unit tests)"
# Each target runs a fixed number of inputs, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report its own deadline as a failure ("context deadline exceeded", no
# failing input; golang/go#75804, fixed in Go 1.27). Counts are sized for ~5-10 s each here.
# FUZZTIME (e.g. 30s or 200000x) overrides every target's budget.
for target in \
  ./internal/profile:FuzzParseProfile:50000 \
  ./internal/hub:FuzzParseConfig:50000 \
  ./internal/agent:FuzzParseSpecs:50000 \
  ./internal/sshd:FuzzForwardPayloads:60000 \
  ./internal/resolver:FuzzParseRequest:60000 \
  ./internal/frontdoor:FuzzParseHost:60000 \
  ./internal/frontdoor:FuzzStripSessionCookie:60000 \
  ./internal/zmux:FuzzReadFrame:300000 \
  ./internal/zmux:FuzzSession:30000; do
  IFS=: read -r pkg fn count <<<"$target"
  budget=${FUZZTIME:-${count}x}
  log=$(mktemp)
  if ! go test "$pkg" -run '^$' -fuzz "^${fn}\$" -fuzztime "$budget" >"$log" 2>&1; then
    echo "fuzzing $fn failed:"; tail -n 40 "$log"; rm -f "$log"; exit 1
  fi
  rm -f "$log"
  echo "fuzzed $fn ($budget)"
done

echo "== go test -race"
go test -race -count=1 -timeout 15m ./...

# Tests built only without the race detector (//go:build !race) because it makes them
# minutes long; what they check is behaviour, not timing.
echo "== go test (tests too slow under -race)"
go test -count=1 -timeout 5m -run '^TestFleetBehindOneAddressAllGetIn$' ./internal/sshd/
