# HEC — see README.md. `make help` lists the targets.

GO        ?= go
GOFLAGS   ?=
FUZZTIME  ?= 20s
BIN       := bin
ARM64_BIN := $(BIN)/linux_arm64
# go-nvml (GPU discovery, cgo builds) declares NVML's deprecated calls;
# keep their warnings out of every first build.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Packages whose tests also run as arm64 binaries under qemu-user (ec/: the
# NEON kernels).
ARM64_TEST_PKGS := ./shared/... ./ec/...

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/hecsys/hec/dpu.Version=$(VERSION)

.PHONY: build
build: ## build bin/hecd, bin/hecctl, bin/linux_arm64/hecd, and libhec for C and Python (lib/libhec.so, lib/libhec.a, include/hec.h)
	@echo "build: bin/hecd, the agent for this machine"
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/hecd ./dpu/cmd/hecd
	@echo "build: bin/hecctl, the CLI"
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/hecctl ./host/cmd/hecctl
	@echo "build: bin/linux_arm64/hecd, the agent for a BlueField's Arm cores (with RDMA where the arm64 cross compiler and libraries are here: images.ArmRDMA)"
	@if command -v aarch64-linux-gnu-gcc >/dev/null && [ -e /usr/lib/aarch64-linux-gnu/libibverbs.so.1 ] && [ -e /usr/lib/aarch64-linux-gnu/librdmacm.so.1 ]; then \
		echo "GOARCH=arm64 CGO_ENABLED=1 CC=aarch64-linux-gnu-gcc go build -tags nonvml ... (RDMA: the image carries its libraries)"; \
		GOARCH=arm64 CGO_ENABLED=1 CC=aarch64-linux-gnu-gcc $(GO) build -tags nonvml -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(ARM64_BIN)/hecd ./dpu/cmd/hecd; \
	else \
		echo "GOARCH=arm64 CGO_ENABLED=0 go build ... (no RDMA: make test-deps installs gcc-aarch64-linux-gnu and the arm64 rdma-core libraries)"; \
		GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(ARM64_BIN)/hecd ./dpu/cmd/hecd; \
	fi
	@echo "build: lib/libhec.so, lib/libhec.a and include/hec.h, the host library for C, C++ and Python"
	CGO_ENABLED=1 $(GO) build -tags nonvml -buildmode=c-shared -ldflags "-X main.buildVersion=$(VERSION)" -o lib/libhec.so ./host/libhec
	CGO_ENABLED=1 $(GO) build -tags nonvml -buildmode=c-archive -ldflags "-X main.buildVersion=$(VERSION)" -o lib/libhec.a ./host/libhec
	@rm -f lib/libhec.h # cgo's own header: include/hec.h is the one to use
	@mkdir -p include && cp host/libhec/hec.h include/hec.h

.PHONY: run
run: build ## start the agent in local emulation and tour every service (stops it at the end)
	test/tour

# make test's go test flags, and the packages it starts first: the longest
# (QEMU's test/vm, then the end-to-end ones), as a scheduler of jobs by
# longest processing time orders them. go test starts packages in the
# order given (./... in import-path order: test/vm last, alone at the end).
# Three packages at a time on these two cores: much of each waits (on
# agents, deadlines, QEMU's disk).
TEST_FLAGS := -race -count=1 -timeout 30m -json -p 3
TEST_FIRST := ./test/vm ./test/e2e ./host/libhec ./coll ./kv ./dpu ./kv/resp

.PHONY: test
test: test-deps ## vet, then the tests with -race (the QEMU ones included, the long loops smaller: test-long; the 10 slowest listed at the end), the fence litmus test without it, then shared/ and ec/ as arm64 binaries under qemu-user (about 10 min)
	$(GO) vet ./...
	bash -o pipefail -c '$(GO) test $(TEST_FLAGS) $(TEST_FIRST) ./... | $(GO) run ./test/testsum -slowest 10'
	@echo "without -race, the ring's amd64 index store (a plain store and a fence, built only then):"
	$(GO) test -count=1 -v -run 'TestPublishIsAFullFence' ./shared/ring
	$(MAKE) test-arm64

# The tests whose loops make test runs smaller (testutil.Sized and
# NeedLong: power cuts, hostile descriptors, DDP on four ranks, torchrun's
# restarts); make test-long runs them whole. LONG_COVERS are the files they
# guard: CI runs make test-long when the hash of those (test/longsum)
# differs from .ci/long.sum, which make test-long writes when it passes.
LONG_TESTS  := TestRedisOwnSuite|TestFlashAMachineBundle|TestPowerCutDuringFlash|TestPowerCutSync|TestPowerCutAsync|TestMillionHostileDescriptors|TestTorch|TestTorchFailover
LONG_PKGS   := ./test/vm ./test/e2e ./host/libhec
LONG_COVERS := kv dpu images test/redis qemu coll shared/ring shared/wire shared/peer host/libhec test/vm test/e2e/e2e_test.go test/e2e/redissuite_test.go

.PHONY: test-long
test-long: test-deps ## the loops make test runs smaller, whole (20 power cuts during flashes, 20 under sync writes, a million hostile descriptors, DDP on 4 ranks), and torchrun's restarts, Redis's own suite, the machine flash (about 15 min); records .ci/long.sum
	bash -o pipefail -c 'HEC_TEST_LONG=1 $(GO) test -race -count=1 -timeout 40m -json -run '"'"'^($(LONG_TESTS))$$'"'"' $(LONG_PKGS) | $(GO) run ./test/testsum -slowest 10'
	test/longsum $(LONG_COVERS) > .ci/long.sum

.PHONY: test-long-if-changed
test-long-if-changed: ## make test-long where the files it guards changed since it last passed (.ci/long.sum): CI's rule
	@if [ "$$(test/longsum $(LONG_COVERS))" = "$$(cat .ci/long.sum 2>/dev/null)" ]; then \
		echo "test-long: not run: the files it guards ($(LONG_COVERS)) are as when it last passed (.ci/long.sum)"; \
	else \
		echo "test-long: the files it guards changed since it last passed (.ci/long.sum): running it"; \
		$(MAKE) test-long; \
	fi

.PHONY: test-deps
test-deps: ## install what the tests need when missing: QEMU for arm64 and x86_64, libibverbs, librdmacm (and their arm64 builds with a cross compiler, for the image), mkfs.ext4, cpio (as root)
	@test/need qemu-system-aarch64 qemu-system-arm || echo "SKIP: the QEMU tests will skip (no qemu-system-aarch64)"
	@test/need qemu-system-x86_64 qemu-system-x86 || echo "SKIP: the RDMA tests in x86_64 guests will skip (no qemu-system-x86_64)"
	@test/need /usr/include/infiniband/verbs.h libibverbs-dev || echo "SKIP: shared/verbs builds without libibverbs' headers and its tests will skip"
	@test/need /usr/include/rdma/rdma_cma.h librdmacm-dev || echo "SKIP: shared/verbs builds without the RDMA connection manager's headers (the RDMA handoff and peer links say so)"
	@test/need /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ibverbs-providers || echo "SKIP: the RDMA tests in x86_64 guests will fail (no soft-RoCE provider: ibverbs-providers)"
	@test/need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu libc6-dev-arm64-cross || echo "SKIP: the arm64 agent builds without cgo, and the RDMA tests between VMs skip (no aarch64-linux-gnu-gcc)"
	@dpkg --print-foreign-architectures | grep -qx arm64 || { [ "$$(id -u)" = 0 ] && dpkg --add-architecture arm64 && apt-get update -qq >/dev/null 2>&1; } || echo "SKIP: arm64 packages cannot be enabled (not root)"
	@test/need /usr/lib/aarch64-linux-gnu/librdmacm.so.1 librdmacm1:arm64 ibverbs-providers:arm64 || echo "SKIP: the arm64 image carries no RDMA libraries, and the RDMA tests between VMs skip"
	@test/need mkfs.ext4 e2fsprogs || true
	@test/need cpio cpio || true
	@test/need redis-cli redis-tools || echo "SKIP: the redis-cli test will skip (no redis-tools)"
	@test/need redis-server redis-server || echo "SKIP: the test comparing hecd's replies with Redis's will skip (no redis-server)"
	@test/need tclsh tcl || echo "SKIP: Redis's own test suite will skip (no tclsh)"
	@test/need etcd etcd-server || echo "SKIP: the etcd membership tests will skip (no etcd-server)"
	@test/need ip iproute2 || echo "SKIP: the cluster tests will skip (no ip)"
	@test/need clang clang llvm libbpf-dev || echo "SKIP: the check that bpf/'s generated bindings are fresh will skip (no clang)"
	@test/need tshark tshark || echo "SKIP: the inspect --pcap test will skip (no tshark)"
	@test/need gcc gcc || echo "SKIP: libhec's C tests will skip (no gcc)"
	@test/need python3 python3 || echo "SKIP: libhec's Python tests will skip (no python3)"
	@test/need /usr/lib/python3/dist-packages/torch/__init__.py python3-torch || echo "SKIP: hec.torch's tests will skip (no python3-torch)"

.PHONY: test-arm64
test-arm64: ## shared/ and ec/ tests as arm64 binaries under qemu-user (installs qemu-user-static)
	@if test/need qemu-aarch64-static qemu-user-static; then \
		echo "GOARCH=arm64 go test -exec qemu-aarch64-static $(ARM64_TEST_PKGS)"; \
		GOARCH=arm64 CGO_ENABLED=0 HEC_TEST_EXEC=qemu-aarch64-static \
			$(GO) test -count=1 -exec qemu-aarch64-static $(ARM64_TEST_PKGS); \
	else \
		echo "SKIP arm64 tests: qemu-user-static is not installed and cannot be installed here"; \
	fi

# IMAGE_OUT puts the image elsewhere than .cache/images/qemu (what
# hecctl qemu up boots): a machine bundle to flash, built with a semantic
# VERSION (make image VERSION=v2.0.0 IMAGE_OUT=.cache/images/machine-v2.0.0).
IMAGE_OUT ?=
KEY       ?=

.PHONY: image
image: build ## build the arm64 bundle (kernel, initramfs with hecd as /init, signed manifest) in .cache/images/qemu
	@echo "image: building the image tool"
	$(GO) build -o $(BIN)/mkimage ./images/cmd/mkimage
	$(BIN)/mkimage --agent $(ARM64_BIN)/hecd --version $(VERSION) $(if $(KEY),--key $(KEY)) $(if $(IMAGE_OUT),--out $(IMAGE_OUT))

# An agent bundle's version: a semantic version, newer than what the agent
# committed (BUNDLE_VERSION=v1.2.3); KEY signs it (default: the development
# key in .cache/keys); BUNDLE_ARCH picks amd64 or arm64.
BUNDLE_VERSION ?= v0.0.0
BUNDLE_ARCH    ?= $(shell $(GO) env GOARCH)

.PHONY: bundle
bundle: ## build an agent bundle (hecd of BUNDLE_VERSION for BUNDLE_ARCH, signed with KEY) in .cache/images/agent, for hecctl flash
	$(GO) build -o $(BIN)/mkimage ./images/cmd/mkimage
	GOARCH=$(BUNDLE_ARCH) $(GO) build -trimpath -ldflags '-s -w -X github.com/hecsys/hec/dpu.Version=$(BUNDLE_VERSION)' -o $(BIN)/bundle/hecd ./dpu/cmd/hecd
	$(BIN)/mkimage --agent-bundle --agent $(BIN)/bundle/hecd --version $(BUNDLE_VERSION) $(if $(KEY),--key $(KEY)) --out .cache/images/agent-$(BUNDLE_VERSION)

.PHONY: bench
bench: test-deps ## benchmarks side by side with their peers; figures in bench-out/ (JSON + markdown); QUICK=1: the scenarios' checks in fewer iterations and no Go benchmarks, for a look before a commit
	@test/need redis-server redis-server || echo "SKIP: no redis-server: the kv scenario will fail to find its peer"
	@test/need iperf3 iperf3 || echo "SKIP: no iperf3: the peers scenario will fail to find its peer"
	@test/need memcached memcached || echo "SKIP: no memcached: the xdp scenario will fail to find its peer"
	@test/need /usr/include/isa-l/erasure_code.h libisal-dev gcc || echo "SKIP: no libisal-dev: the ec scenario will fail to find its peer"
	@test/need mpicc openmpi-bin libopenmpi-dev || echo "SKIP: no Open MPI: the coll scenario will fail to find its peer"
	@mkdir -p bench-out
	$(if $(QUICK),,$(GO) test -run '^$$' -bench . -benchmem -benchtime 300ms ./... | tee bench-out/go-bench.txt)
	$(GO) run ./test/bench -out bench-out $(if $(QUICK),-quick)

.PHONY: redis-suite
redis-suite: build ## Redis 7.0.15's own tests (string, keyspace, protocol, … units) against hecd's RESP: counts and failures
	test/redis/suite bin/hecd

.PHONY: generate
generate: ## regenerate bpf/'s committed bindings (hec_bpfel.go, .o) from xdp.c with clang (installs clang, libbpf-dev)
	@test/need clang clang llvm libbpf-dev
	$(GO) generate ./bpf

.PHONY: lint
lint: ## gofmt, go vet, every package built for arm64, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfe[lb]\.go$$')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...
	$(GO) tool staticcheck ./...

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

.PHONY: clean
clean: ## remove build outputs (keeps the download cache)
	rm -rf $(BIN) lib include bench-out
