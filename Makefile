# kvmesh — `make run` starts an agent on embedded defaults, `make test` runs
# every test (installing what the tests need first).

GO        ?= go
BIN       := build/kvmesh
POLICIES  := $(patsubst wasm-policies/%/main.go,build/policies/%.wasm,$(wildcard wasm-policies/*/main.go))
APT_PKGS  := protobuf-compiler python3-grpcio python3-protobuf wabt redis-server iproute2
PY        := /usr/bin/python3
TEST_TIMEOUT ?= 20m

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

bench: deps build policies
	./$(BIN) bench store --json
	$(GO) test -run '^$$' -bench . -benchtime 2x ./agent/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	protoc --proto_path=proto --go_out=. --go_opt=module=github.com/kvmesh/kvmesh \
		--go-grpc_out=. --go-grpc_opt=module=github.com/kvmesh/kvmesh $$(find proto -name '*.proto')

clean:
	rm -rf build
