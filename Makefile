# iotsafe — see README.md. 'make demo' and 'make test' install what is missing first.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
BIN := bin/iotsafe
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all setup build demo test lint clean install agents

all: build

setup:
	@bash scripts/setup.sh

GOBUILD := go build -ldflags "-X github.com/iotsafe/iotsafe/internal/cli.Version=$(VERSION)" -o $(BIN) ./cmd/iotsafe

build: setup
	$(GOBUILD)

# The device agent alone (cmd/iotsafe-agent, about 6 MB: no hub, admin tool or lab),
# static and stripped, for device architectures: bin/iotsafe-agent-linux-TARGET for
# every target, or TARGETS="armv7 arm64" for some (scripts/build-agents.sh lists them).
# Needs only Go.
agents:
	@bash scripts/build-agents.sh $(VERSION) $(TARGETS)

demo: build
	./$(BIN) demo

test: setup
	@bash scripts/test.sh

lint: setup
	gofmt -l . && go vet ./... && staticcheck ./... && go run ./cmd/iotsafe-lint ./...

# Installs the binary (and iotsafe-agent, a link to it that runs the agent alone, as
# the agent unit expects) and the systemd units (dist/systemd); DESTDIR for packaging.
# It enables nothing: 'systemctl enable --now iotsafe-hub' (or iotsafe-agent on a device).
# It needs only Go: unlike 'build', it installs none of the test and lab peers
# (setup.sh) on a production host.
PREFIX ?= /usr/local
UNITDIR ?= /etc/systemd/system
install:
	$(GOBUILD)
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/iotsafe
	ln -sf iotsafe $(DESTDIR)$(PREFIX)/bin/iotsafe-agent
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|/usr/local/bin/iotsafe|$(PREFIX)/bin/iotsafe|' dist/systemd/iotsafe-hub.service > $(DESTDIR)$(UNITDIR)/iotsafe-hub.service
	sed 's|/usr/local/bin/iotsafe|$(PREFIX)/bin/iotsafe|' dist/systemd/iotsafe-agent.service > $(DESTDIR)$(UNITDIR)/iotsafe-agent.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/iotsafe-hub.service $(DESTDIR)$(UNITDIR)/iotsafe-agent.service
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "installed $(PREFIX)/bin/iotsafe (and iotsafe-agent) and the units in $(UNITDIR): systemctl enable --now iotsafe-hub (docs/operations.md)"

clean:
	rm -rf bin
