# ringxds build and test entry points. `make run` and `make test` are the two
# commands the README promises on a fresh machine.

GO        ?= go
BIN       := bin
PKGS      := ./...
# The kube-apiserver + etcd used by the Kubernetes integration tests. Built
# once per machine and cached outside the clone (see hack/testbin.sh).
KUBE_VERSION ?= v1.37.2
STATICCHECK_VERSION ?= v0.8.2
TESTBIN   := $(CURDIR)/.testbin
# The fuzz targets (docs/fuzzing.md), as Name:package: go test -fuzz takes
# one target of one package per run.
FUZZ_TARGETS := \
	FuzzParseFile:./internal/watch \
	FuzzParseFileItems:./internal/watch \
	FuzzKubeAnnotations:./internal/watch \
	FuzzKubeEndpoints:./internal/watch \
	FuzzDebugQuery:./internal/debug \
	FuzzDecode:./clientlib \
	FuzzRings:./internal/ringhash
# How long `make fuzz` runs each target, one after another, and how long
# `make test` does (fuzz-short). FUZZFLAGS adds flags, e.g. -parallel 1.
FUZZTIME       ?= 5m
FUZZTIME_SHORT ?= 3s
FUZZFLAGS      ?=

# The image `make image` writes, and the name its index gives it (the digest
# does not depend on the name).
IMAGE_TAR  ?= $(BIN)/xds-server-image.tar
IMAGE_NAME ?= ringxds/xds-server:v0.1.0

.PHONY: all build run demo demo-node image release-pin test test-unit test-k8s testbin browser node-clients py-clients bench bench-scale lint fuzz fuzz-short fuzz-run clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

run: build
	$(BIN)/xds-server

## demo: xds-server, three backends and a proxyless gRPC client checking every
## key against /debug/pick; everything stops by itself.
demo:
	GO=$(GO) bash examples/grpc/demo.sh

## demo-node: the same demo with a proxyless Node client (grpc-js from npm).
demo-node: node-clients
	GO=$(GO) CLIENT=node NODE_PATH=$(TESTBIN)/node_modules bash examples/grpc/demo.sh

## image: the xds-server container image, built without a Docker engine
## (hack/image: the static binary alone, no base image), written as an OCI
## archive; prints its digest, the same for the same source and Go version.
image:
	$(GO) run ./hack/image -o $(IMAGE_TAR) -name $(IMAGE_NAME)

## release-pin: pins deploy/overlays/release to the digest of that image, for
## a release pushed from the archive as it is (README, "Run it in Kubernetes").
release-pin: image
	$(GO) run ./hack/image pin -archive $(IMAGE_TAR) -kustomization deploy/overlays/release/kustomization.yaml

## test: the whole suite (unit, end-to-end with real grpc-go, grpc-js and
## C-core clients, Kubernetes against a real API server, the Helm chart, and
## the image, which hack/image's tests build and start themselves).
test: testbin browser node-clients py-clients lint fuzz-short
	RINGXDS_TESTBIN=$(TESTBIN) RINGXDS_REQUIRE_TESTBIN=1 RINGXDS_REQUIRE_BROWSER=1 \
	  RINGXDS_NODE_MODULES=$(TESTBIN)/node_modules RINGXDS_REQUIRE_NODE=1 RINGXDS_REQUIRE_PYGRPC=1 \
	  $(GO) test -race -count=1 -timeout 30m $(PKGS)

test-unit:
	$(GO) test -race -count=1 $(PKGS)

## test-k8s: only the tests that run against the real kube-apiserver + etcd.
test-k8s: testbin
	RINGXDS_TESTBIN=$(TESTBIN) RINGXDS_REQUIRE_TESTBIN=1 $(GO) test -race -count=1 -timeout 20m -run 'Kube|K8s' ./internal/watch/... ./deploy/... ./cmd/xds-server/ ./hack/image/

testbin:
	KUBE_VERSION=$(KUBE_VERSION) bash hack/testbin.sh $(TESTBIN)

## node-clients: the pinned grpc-js xDS client of examples/grpc-node, from
## npm, cached outside the clone (hack/node-clients.sh).
node-clients:
	bash hack/node-clients.sh $(TESTBIN)

## py-clients: gRPC C-core through Debian's python3-grpcio (1.51 on bookworm).
py-clients:
	@if /usr/bin/python3 -c 'import grpc' 2>/dev/null; then exit 0; fi; \
	  echo "installing python3-grpcio (gRPC C-core) for the proxyless C-core tests"; \
	  if ! { apt-get update && apt-get install -y python3-grpcio; }; then \
	    echo "could not install python3-grpcio (apt-get update && apt-get install -y python3-grpcio, as root);"; \
	    echo "install it by hand, or run the tests without it: make test-unit"; \
	    exit 1; \
	  fi

## browser: Debian's Chromium, which the debug page tests drive headless.
browser:
	@if [ -x /usr/bin/chromium ]; then exit 0; fi; \
	  echo "installing chromium for the debug page browser tests"; \
	  if ! { apt-get update && apt-get install -y chromium; }; then \
	    echo "could not install chromium (apt-get update && apt-get install -y chromium, as root);"; \
	    echo "install it by hand, or run the tests without the browser: make test-unit"; \
	    exit 1; \
	  fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## fuzz: every fuzz target for FUZZTIME (5m) each, one after another. New
## crashers land in the package's testdata/fuzz/<Target>/ and fail `go test`
## from then on, until fixed.
fuzz:
	@$(MAKE) --no-print-directory fuzz-run FUZZ_FOR=$(FUZZTIME)

## fuzz-short: every fuzz target for a few seconds, on top of its checked-in
## seed corpus (which plain `go test` runs too); part of `make test`.
fuzz-short:
	@$(MAKE) --no-print-directory fuzz-run FUZZ_FOR=$(FUZZTIME_SHORT)

fuzz-run:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  name=$${t%%:*}; pkg=$${t#*:}; \
	  echo "$(GO) test -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZ_FOR) $(FUZZFLAGS) $$pkg"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_FOR) $(FUZZFLAGS) $$pkg; \
	done

## bench-scale: the control plane scale matrix (spawns xds-server on loopback,
## about 25 minutes) and rewrites "## Control plane scale" in docs/benchmarks.md.
bench-scale:
	bash hack/bench-scale.sh

clean:
	rm -rf $(BIN) testout
