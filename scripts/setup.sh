#!/usr/bin/env bash
# Installs what iotsafe needs to build, demo and test on Debian, and nothing that is
# already there. Safe to run again. Needs root (or sudo) only when a package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: the real peers the tests use (OpenSSH client, Dropbear, curl), sqlite3
# for operators who want to look into the registry, and util-linux/mount/iproute2/nftables
# for the access-control tests (unshare, bind mounts, network namespaces, nft to inspect).
# The lab's peers: OpenSSH's server and Caddy (started by 'iotsafe bench' on free loopback
# ports with generated configuration, never as system services). OpenSSL's command line
# checks the TLS policy of the hub's listeners (s_client, cipher names); Mosquitto's
# clients (mosquitto_pub, mosquitto_sub) are the real MQTT peers of the hub's broker, and
# Mosquitto's broker the central broker its bridge talks to (started by the tests on free
# loopback ports, never as a system service). sslscan, testssl.sh and ssh-audit are the reference
# tools 'iotsafe scan' is checked against. gcc, libssl-dev and libwolfssl-dev build the
# TLS lab's OpenSSL and wolfSSL helpers ('iotsafe bench tls'). PostgreSQL's server is the
# shared registry of several hubs; the tests start scratch clusters of their own as an
# unprivileged user (internal/pgtest), never the system's cluster or service. systemd
# runs the shipped units (dist/systemd) in a test: a manager of the test's own, in a
# private mount namespace, never the host's init. qemu's user-mode emulators run the
# agent built for device architectures (32-bit ARM, big-endian MIPS) against a real hub,
# called by name (no binfmt handler is registered); busybox's ash, OpenWrt's shell, reads
# the OpenWrt init script (dist/openwrt).
PKGS=(openssh-client dropbear-bin curl sqlite3 ca-certificates iproute2 util-linux mount nftables openssh-server caddy python3 python3-venv openssl mosquitto-clients mosquitto sslscan testssl.sh ssh-audit gcc libc6-dev libssl-dev libwolfssl-dev xmlsec1 postgresql systemd qemu-user busybox chromium fonts-dejavu-core patch diffutils)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Installing a server package must not start its system service (sshd on port 22, caddy):
  # a policy-rc.d that says "no" for the length of the install, unless one exists already.
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    guard=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$guard" >/dev/null
    $SUDO chmod 755 "$guard"
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$guard" ] || $SUDO rm -f "$guard"
fi

# Go: the toolchain comes with the machine; go.mod names the version it needs.
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
if ! command -v go >/dev/null; then
  echo "setup: Go is not installed. Install Go $(awk '/^go /{print $2}' go.mod) or newer (https://go.dev/dl) and run again." >&2
  exit 1
fi
go mod download

# staticcheck, pinned, into GOPATH/bin.
SC_VERSION=v0.8.2
if ! staticcheck -version 2>/dev/null | grep -q "${SC_VERSION#v}"; then
  echo "setup: installing staticcheck $SC_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$SC_VERSION"
fi

# Python tools the tests run as real peers, pinned, in the project's own virtual
# environment (Debian's Python refuses system-wide pip installs): ssh-audit 3.x audits a
# default hub; the DeviceHive client library talks to the REST API unchanged; signxml and
# python-xmlsec verify and decrypt the classic form of WS Compact Security messages;
# paho-mqtt is the MQTT 5 client whose network thread an invalid ack kills; zeep is the
# SOAP client an integrator points at the hub's WSDL.
VENV="${IOTSAFE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/iotsafe/venv}"
PY_TOOLS=(ssh-audit==3.9.0 devicehive==2.1.6 requests==2.32.3 websocket-client==1.8.0 six==1.16.0
  signxml==5.2.0 xmlsec==1.3.17 lxml==6.1.3 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 certifi==2026.10.18
  paho-mqtt==2.1.0 zeep==4.3.1 attrs==26.1.0 isodate==0.7.2 platformdirs==4.14.8 pytz==2026.6 requests-file==3.0.1
  requests-toolbelt==1.0.0)
py_tools_missing() {
  [ -x "$VENV/bin/pip" ] || return 0
  local have
  have=$("$VENV/bin/pip" freeze 2>/dev/null | tr 'A-Z_' 'a-z-')
  for t in "${PY_TOOLS[@]}"; do
    grep -qx "$(echo "$t" | tr 'A-Z_' 'a-z-')" <<<"$have" || return 0
  done
  return 1
}
if py_tools_missing; then
  echo "setup: installing ${PY_TOOLS[*]} into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_TOOLS[@]}"
fi
