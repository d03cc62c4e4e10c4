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
echo "== iotsafe-lint (deferrednil, nilness)"
# The project's own checks for what vet and staticcheck miss: a named func/interface
# result returned as nil and then called by a deferred closure (issue 56's crash), and
# x/tools' nilness (nil dereferences and nil func calls on the SSA form).
go run ./cmd/iotsafe-lint ./...
echo "== third_party (mochi-mqtt/server with the hub's patch; its own tests)"
scripts/check-third-party.sh

echo "== fuzz (short pass per target; seeds in testdata/ also run as unit tests)"
# Every Fuzz function in the tree runs (the list is derived, so a new one cannot be
# forgotten). Each runs a fixed number of inputs, not a duration: with a duration, Go
# 1.26's fuzz coordinator can report its own deadline as a failure ("context deadline
# exceeded", no failing input; golang/go#75804, fixed in Go 1.27). The default count is
# sized for ~5-10 s per target here; slow or fast targets name their own below.
# FUZZTIME (e.g. 30s or 200000x) overrides every target's budget.
fuzz_count() {
  case "$1" in
    FuzzSession) echo 30000 ;;
    FuzzLikeMatch | FuzzPollFilter) echo 10000 ;; # slower per input (a regexp reference; time parsing)
    FuzzInsertNotification) echo 5000 ;; # each input goes through the store and its fsync
    FuzzReadFrame) echo 300000 ;;
    FuzzForwardPayloads | FuzzParseRequest | FuzzParseHost | FuzzStripSessionCookie) echo 60000 ;;
    *) echo 50000 ;;
  esac
}
targets=$(grep -rlE --include='*_test.go' --exclude-dir=third_party '^func Fuzz[A-Za-z0-9_]+\(' . | sort | while read -r f; do
  grep -oE '^func Fuzz[A-Za-z0-9_]+' "$f" | sed "s|^func |./$(dirname "${f#./}"):|"
done)
[ -n "$targets" ] || { echo "no fuzz targets found"; exit 1; }
for target in $targets; do
  IFS=: read -r pkg fn <<<"$target"
  budget=${FUZZTIME:-$(fuzz_count "$fn")x}
  log=$(mktemp)
  if ! go test "$pkg" -run '^$' -fuzz "^${fn}\$" -fuzztime "$budget" >"$log" 2>&1; then
    echo "fuzzing $fn failed:"; tail -n 40 "$log"; rm -f "$log"; exit 1
  fi
  rm -f "$log"
  echo "fuzzed $fn in $pkg ($budget)"
done

echo "== go test -race"
# Tests' artifacts (the console's screenshots) go to test-output/.
mkdir -p test-output
go test -race -count=1 -timeout 15m -artifacts -outputdir "$PWD/test-output" ./...

# Tests built only without the race detector (//go:build !race) because it makes them
# minutes long; what they check is behaviour, not timing.
echo "== go test (tests too slow under -race)"
go test -count=1 -timeout 5m -run '^TestFleetBehindOneAddressAllGetIn$' ./internal/sshd/
