# splicer: build, test, demo, benchmark. Every target installs or builds what it needs.
GO      ?= go
BIN     := bin/splicer
BENCH   := bin/splicer-bench
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/splicer/splicer/internal/buildinfo.Version=$(VERSION) -X github.com/splicer/splicer/internal/buildinfo.Revision=$(REVISION)
PKGS    := ./...
TESTFLAGS ?=
# prometheus brings promtool, which checks and unit-tests deploy/prometheus/alerts.yaml.
APT_DEPS := iproute2 ethtool haproxy socat iperf3 curl nginx-light libnginx-mod-stream systemd wrk sockperf goaccess logrotate prometheus apache2-utils
GEN_DEPS := clang-19 llvm-19 libbpf-dev

.PHONY: test-cert race fuzz tidy all build test demo bench bench-quick bench-deps deps gen-deps generate check-generated fmt lint clean

all: build

# build: the daemon (bin/splicer) and, beside it, splicer-bench (demo and
# benchmarks: the lab, load generators and plots the daemon does not link).
# The daemon is static (no cgo), as released: only then can it drop its
# capabilities on every thread once it serves (AllThreadsSyscall).
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/splicer
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BENCH) ./cmd/splicer-bench

# deps installs the Debian packages the lab tests and the demo drive (root).
deps:
	@missing=""; for p in $(APT_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

bench-deps: deps

gen-deps:
	@missing=""; for p in $(GEN_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# test-cert regenerates examples/tls/test.crt and test.key: a self-signed
# pair for *.test (ECDSA P-256, ten years) that examples/https.yaml serves.
test-cert:
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
		-subj "/CN=*.test" -addext "subjectAltName=DNS:*.test,DNS:test" \
		-keyout examples/tls/test.key -out examples/tls/test.crt

# demo: the embedded default run (a lab, an origin, traffic through every engine).
demo: deps build
	./$(BIN) demo

# test: unit and lab tests. As root the privileged tests run; under CI=true
# a skipped privileged test is a failure.
test: deps
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 9m $(TESTFLAGS) $(PKGS)

bench: deps build
	./$(BIN) bench all --json out/bench.json --plot out/plots

bench-quick: deps build
	./$(BIN) bench all --quick

# generate rebuilds the BPF objects with clang-19 (bpf2go); they are committed.
generate: gen-deps
	$(GO) generate ./...

# check-generated fails when the committed BPF objects are not what the C makes.
check-generated: generate
	git diff --exit-code -- '*_bpfel.go' '*_bpfel.o' || (echo "BPF objects are stale: run make generate and commit" >&2; exit 1)

# race: the race detector over the packages whose tests are quick on
# loopback (the lab packages take minutes without it).
RACE_PKGS := ./internal/... ./proxy/httpcore ./proxy/proxyproto ./proxy/all ./proxy/filter ./proxy/socks5 \
	./engine/copy ./engine/pipe ./engine/enginetest ./deploy/...
race:
	$(GO) test -race -count=1 $(RACE_PKGS)
	$(GO) test -race -count=1 -run 'Test(Reload|EchoThroughEveryEngine|BytesCount|AccessLog|ClientRules|PanicCloses)' ./forwarder

# fuzz: every fuzz target for FUZZTIME each (CI: a short run; a campaign:
# make fuzz FUZZTIME=10m). New crashers land in the package's testdata/fuzz
# and then run as regression tests in make test. A run that fails with
# "context deadline exceeded" and wrote no crasher is Go's own fuzz
# coordinator misreading its -fuzztime deadline (a race in internal/fuzz:
# the parent context's error is read before the child's is set); such a
# target runs again, up to 3 times. Any other failure stops at once.
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	./proxy/httpcore:FuzzRequestHead ./proxy/httpcore:FuzzResponseHead ./proxy/httpcore:FuzzChunked \
	./proxy/filter:FuzzMessage ./proxy/socks5:FuzzRequest ./proxy/socks5:FuzzUserPass \
	./proxy/proxyproto:FuzzRead ./internal/config:FuzzParse ./engine/ip/internal/datapath:FuzzDatapath \
	./proxy/tlshello:FuzzRead
fuzz:
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		for try in 1 2 3; do \
			$(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) $$pkg >/tmp/splicer-fuzz.log 2>&1 && break; \
			if [ $$try = 3 ] || grep -q 'Failing input written to' /tmp/splicer-fuzz.log || \
				! grep -q 'context deadline exceeded' /tmp/splicer-fuzz.log; then cat /tmp/splicer-fuzz.log; exit 1; fi; \
			echo "  Go's fuzz coordinator failed on its own deadline, no crasher written: again"; \
		done; \
	done

# tidy: go.mod and go.sum are exactly what the imports need.
tidy:
	@cp go.mod /tmp/splicer-go.mod.$$$$ && cp go.sum /tmp/splicer-go.sum.$$$$ && $(GO) mod tidy && \
	if cmp -s go.mod /tmp/splicer-go.mod.$$$$ && cmp -s go.sum /tmp/splicer-go.sum.$$$$; then ok=1; else ok=0; fi; \
	rm -f /tmp/splicer-go.mod.$$$$ /tmp/splicer-go.sum.$$$$; \
	if [ $$ok = 0 ]; then echo "go.mod/go.sum were not tidy (go mod tidy changed them: commit the result)" >&2; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)

clean:
	rm -rf bin out
