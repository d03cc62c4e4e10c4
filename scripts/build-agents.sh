#!/usr/bin/env bash
# Builds the device agent alone (cmd/iotsafe-agent: no hub, admin tool or lab) as static,
# stripped binaries for the usual device architectures: bin/iotsafe-agent-linux-TARGET,
# and bin/iotsafe-agent.sha256 to check copies on the devices. Needs only Go.
#   scripts/build-agents.sh [VERSION] [TARGET...]   (default: every target below)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
version=${1:-dev}
shift || true

# TARGET -> GOARCH and its variant. ARMv5-v7 cover 32-bit ARM boards (v6: Raspberry Pi 1
# and Zero; v7: most others); mips and mipsle are built for softfloat, which runs on
# router SoCs with and without an FPU.
goenv() {
  case "$1" in
    amd64 | 386 | arm64 | riscv64) echo "GOARCH=$1" ;;
    armv5 | armv6 | armv7) echo "GOARCH=arm GOARM=${1#armv}" ;;
    mips | mipsle) echo "GOARCH=$1 GOMIPS=softfloat" ;;
    *) echo "unknown target $1 (known: amd64 386 arm64 armv5 armv6 armv7 mips mipsle riscv64)" >&2; return 1 ;;
  esac
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(amd64 386 arm64 armv5 armv6 armv7 mips mipsle riscv64)
mkdir -p bin
sums=bin/iotsafe-agent.sha256
: >"$sums"
for t in "${targets[@]}"; do
  vars=$(goenv "$t")
  out=bin/iotsafe-agent-linux-$t
  # shellcheck disable=SC2086 # vars is a list of assignments
  env CGO_ENABLED=0 GOOS=linux $vars go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out" ./cmd/iotsafe-agent
  (cd bin && sha256sum "${out#bin/}") >>"$sums"
  awk -v f="$out" -v n="$(stat -c %s "$out")" -v e="$vars" 'BEGIN { printf "%-34s %5.1f MB  (%s)\n", f, n / 1e6, e }'
done
echo "checksums in $sums; copy the one for your device to /usr/bin/iotsafe-agent (docs/operations.md, 'Installing the agent on a device')"
