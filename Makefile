# kvmesh — `make run` starts an agent on embedded defaults, `make test` runs
# every test (installing what the tests need first).

GO        ?= go
BIN       := build/kvmesh
POLICIES  := $(patsubst wasm-policies/%/main.go,build/policies/%.wasm,$(wildcard wasm-policies/*/main.go))
APT_PKGS  := protobuf-compiler python3-grpcio python3-protobuf wabt redis-server iproute2
PY        := /usr/bin/python3
TEST_TIMEOUT ?= 20m
PY_PROTOS := proto/kvmesh/v1/kvmesh.proto proto/kvmesh/v1/kvcache.proto proto/sglang/runtime/hicache/hicache.proto

export PATH := $(shell $(GO) env GOPATH)/bin:$(PATH)

.PHONY: all build run test deps bench lint proto policies clean

all: build

build: $(BIN)

$(BIN): FORCE
	$(GO) build -o $(BIN) ./cmd/kvmesh

FORCE:

run: build
	./$(BIN) agent

# deps installs the system packages the tests use; it does nothing when they
# are already there.
deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

policies: $(POLICIES)

build/policies/%.wasm: wasm-policies/%/main.go $(wildcard wasm-policies/sdk/*.go) FORCE
	@mkdir -p build/policies
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $@ ./wasm-policies/$*

test: deps build policies
	$(GO) vet ./...
	KVMESH_BIN=$(CURDIR)/$(BIN) KVMESH_POLICY_DIR=$(CURDIR)/build/policies \
		$(GO) test -timeout $(TEST_TIMEOUT) -count=1 ./...
	KVMESH_BIN=$(CURDIR)/$(BIN) $(PY) -m unittest discover -s client/python/tests -v

bench: deps build policies
	./$(BIN) bench store --json
	./$(BIN) bench local --json
	./$(BIN) bench transport --json
	./$(BIN) bench cluster --nodes 16 --json
	$(GO) test -run '^$$' -bench . -benchtime 2x ./agent/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^third_party/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	third_party/quic-go.sh --check

proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	protoc --proto_path=proto --go_out=. --go_opt=module=github.com/kvmesh/kvmesh \
		--go-grpc_out=. --go-grpc_opt=module=github.com/kvmesh/kvmesh $$(find proto -name '*.proto')
	@# Python: generated with the same import paths as Go (kvcache.proto imports
	@# kvmesh/v1/kvmesh.proto), then flattened into _proto/ with relative imports.
	tmp=$$(mktemp -d) && protoc --proto_path=proto --python_out=$$tmp $(PY_PROTOS) && \
	for f in $(PY_PROTOS); do p=$${f#proto/}; p=$${p%.proto}_pb2.py; \
		sed -E 's/^from (kvmesh|sglang)[a-z0-9_.]* import ([a-z0-9_]+_pb2) as/from . import \2 as/' $$tmp/$$p \
			> client/python/kvmesh/_proto/$$(basename $$p); done; rm -rf $$tmp

clean:
	rm -rf build

# ---- GPU swap core (gpu/cuda) ------------------------------------------------
# `make cuda` compiles gpu/cuda/*.cu with nvcc into a static library that the
# cgo code under `-tags cuda` links (build/cuda/libkvmeshswap.a). `make
# cuda-check` installs Debian's nvidia-cuda-toolkit (non-free) when nvcc is
# missing, then compiles the CUDA code and the cuda-tagged Go packages without
# running anything, so it needs no GPU. Neither is part of `make test`.
NVCC       ?= nvcc
CUDA_LIB   := build/cuda/libkvmeshswap.a
CUDA_SRCS  := $(wildcard gpu/cuda/*.cu)
CUDA_HDRS  := $(wildcard gpu/cuda/*.h)
# A100 (sm_80), A10/L4-class (sm_86), H100/H200 (sm_90), plus PTX for newer parts.
CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 \
              -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O3 -std=c++14 -Xcompiler -fPIC,-Wall $(CUDA_ARCH)

.PHONY: cuda cuda-check cuda-deps

cuda: $(CUDA_LIB)

$(CUDA_LIB): $(CUDA_SRCS) $(CUDA_HDRS)
	@mkdir -p build/cuda
	$(NVCC) $(NVCCFLAGS) -lib -o $@ $(CUDA_SRCS)

# cuda-deps enables the contrib and non-free components in the Debian apt
# sources (the toolkit and the driver stubs it depends on live there) and
# installs the toolkit without recommends (no kernel modules), only when nvcc
# is absent.
CUDA_APT_COMPONENTS := contrib non-free non-free-firmware
cuda-deps:
	@if ! command -v $(NVCC) >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		for c in $(CUDA_APT_COMPONENTS); do \
			if [ -f /etc/apt/sources.list.d/debian.sources ]; then \
				$$SUDO sed -i -E "/^Components:/{/ $$c( |\$$)/!s/\$$/ $$c/}" /etc/apt/sources.list.d/debian.sources; \
			fi; \
			if [ -f /etc/apt/sources.list ]; then \
				$$SUDO sed -i -E "/^deb .* main/{/ $$c( |\$$)/!s/\$$/ $$c/}" /etc/apt/sources.list; \
			fi; \
		done; \
		echo "installing nvidia-cuda-toolkit (large)"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit >/dev/null; \
	fi
	@$(NVCC) --version | tail -n 2

cuda-check: cuda-deps
	$(MAKE) --no-print-directory cuda
	CGO_ENABLED=1 $(GO) vet -tags cuda ./gpu/...
	CGO_ENABLED=1 $(GO) build -tags cuda -o build/kvmesh-cuda ./cmd/kvmesh
	CGO_ENABLED=1 $(GO) test -tags cuda -c -o build/cuda/gpu-cuda.test ./gpu/cuda
	@echo "cuda-check: CUDA code and cuda-tagged Go compiled and linked (not run)"
