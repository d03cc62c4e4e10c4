# iotsafe — see README.md. 'make demo' and 'make test' install what is missing first.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
BIN := bin/iotsafe
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all setup build demo test lint clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	go build -ldflags "-X github.com/iotsafe/iotsafe/internal/cli.Version=$(VERSION)" -o $(BIN) ./cmd/iotsafe

demo: build
	./$(BIN) demo

test: setup
	@bash scripts/test.sh

lint: setup
	gofmt -l . && go vet ./... && staticcheck ./...

clean:
	rm -rf bin
