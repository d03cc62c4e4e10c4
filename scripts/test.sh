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
echo "== go vet"
go vet ./...
echo "== staticcheck"
staticcheck ./...

echo "== fuzz (short pass per target; seeds in testdata/ also run as unit tests)"
FUZZTIME=${FUZZTIME:-8s}
for target in \
  ./internal/profile:FuzzParseProfile \
  ./internal/hub:FuzzParseConfig \
  ./internal/agent:FuzzParseSpecs \
  ./internal/sshd:FuzzForwardPayloads \
  ./internal/resolver:FuzzParseRequest \
  ./internal/frontdoor:FuzzParseHost \
  ./internal/frontdoor:FuzzStripSessionCookie \
  ./internal/zmux:FuzzReadFrame \
  ./internal/zmux:FuzzSession; do
  pkg=${target%%:*}; fn=${target##*:}
  log=$(mktemp)
  if ! go test "$pkg" -run '^$' -fuzz "^${fn}\$" -fuzztime "$FUZZTIME" >"$log" 2>&1; then
    echo "fuzzing $fn failed:"; tail -n 40 "$log"; rm -f "$log"; exit 1
  fi
  rm -f "$log"
  echo "fuzzed $fn for $FUZZTIME"
done

echo "== go test -race"
go test -race -count=1 -timeout 15m ./...
