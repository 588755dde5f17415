# holdfast: the commands people and CI run. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

BIN        := $(CURDIR)/bin
DIST       := $(CURDIR)/dist
# The release version of every Go module and SDK package (make set-version).
RELEASE_VERSION := $(shell cat $(CURDIR)/VERSION)
GO_MODULES := proto core harness server plugins/memory plugins/etcd plugins/redis plugins/postgres sdk-go sdk-go/holdfasttest conformance plugins/example chaos abuse
# Modules whose tests need no external service; the etcd, Redis and PostgreSQL
# plugins run in test-etcd, test-redis and test-postgres with their servers.
GO_UNIT_MODULES := proto core harness server plugins/memory sdk-go sdk-go/holdfasttest conformance plugins/example
GO_TEST    ?= go test -race -count=1 -timeout 15m
# Binaries the tests drive as real subprocesses.
export HOLDFAST_BIN_DIR := $(BIN)
# In `make test` a test that needs a service it cannot find fails instead of
# skipping.
export HOLDFAST_REQUIRE_SERVICES ?= 1

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## build the pinned code generators and the release tool (holdfast-release) into bin/
	@cd tools && GOWORK=off GOBIN=$(BIN) go install tool && GOWORK=off go build -o $(BIN)/holdfast-release ./release

.PHONY: generate
generate: tools sdk-codegen-tools ## regenerate code from proto/ (Go, TypeScript, Python)
	find proto -name '*.pb.go' -delete
	find sdk-ts/src/gen -name '*_pb.ts' -delete
	find sdk-python/src/holdfast/lock \( -name '*_pb2.py' -o -name '*_pb2.pyi' -o -name '*_connect.py' \) -delete
	PATH=$(BIN):$$PATH $(BIN)/buf generate

.PHONY: check-generated
check-generated: generate ## fail when regenerating changes committed code
	@if [ -n "$$(git status --porcelain -- $(GENERATED_DIRS))" ]; then \
		git status --porcelain -- $(GENERATED_DIRS); \
		echo "generated code is stale: run 'make generate' and commit the result" >&2; exit 1; fi

# Where `make generate` writes; check-generated fails when any of it changes.
GENERATED_DIRS := proto sdk-ts/src/gen sdk-python/src/holdfast/lock

.PHONY: sdk-codegen-tools
sdk-codegen-tools: ## install the pinned TS/Python generators (npm ci in sdk-ts, sdk-python/.venv)
	bash scripts/setup.d/40-node.sh
	bash scripts/setup.d/50-python.sh

.PHONY: test-sdk-ts
test-sdk-ts: build sdk-codegen-tools ## TypeScript SDK tests (node --test) against a real holdfast serve
	scripts/with-server.sh timeout 600 bash -c 'cd sdk-ts && npm test'

.PHONY: dist-npm
dist-npm: ## the TypeScript SDK's npm tarball in dist/npm/ (npm pack; its prepack builds dist/esm and dist/cjs)
	bash scripts/setup.d/40-node.sh
	rm -rf dist/npm && mkdir -p dist/npm
	cd sdk-ts && npm pack --pack-destination $(CURDIR)/dist/npm

.PHONY: test-release-npm
test-release-npm: build dist-npm ## install the npm tarball in a fresh project outside the checkout; take a lock from ESM, CommonJS and TypeScript (no DOM lib)
	scripts/release/test-npm.sh dist

.PHONY: test-sdk-python
test-sdk-python: build sdk-codegen-tools ## Python SDK tests (pytest) against a real holdfast serve
	scripts/with-server.sh timeout 600 bash -c 'cd sdk-python && .venv/bin/python -m pytest -q -o faulthandler_timeout=120'

.PHONY: dist-python
# Out of tree: `python -m build` writes the sdist into dist/python and builds
# the wheel from it in a temporary directory; the pinned hatchling (from
# sdk-python/.venv) writes no build/ or *.egg-info into sdk-python.
dist-python: sdk-codegen-tools ## the Python SDK's wheel and sdist in dist/python/
	rm -rf $(DIST)/python
	cd sdk-python && .venv/bin/python -m build --no-isolation --outdir $(DIST)/python .
	@left=$$(git status --porcelain --ignored -- sdk-python | grep -E '(^|/)(build/|[^/]*\.egg-info/?)$$' || true); \
		if [ -n "$$left" ]; then echo "dist-python: the build wrote into sdk-python: $$left" >&2; exit 1; fi
	@ls -l $(DIST)/python

.PHONY: test-release-python
test-release-python: build dist-python ## the Python wheel from dist/ in fresh venvs (3.10, 3.11) outside the checkout, against a real holdfast serve
	scripts/release/test-python.sh $(DIST)

.PHONY: build
build: web-build ## build holdfast and the plugin binaries into bin/ (the live view first: it is embedded)
	go build -o $(BIN)/ ./server/cmd/holdfast ./plugins/memory/cmd/holdfast-backend-memory ./conformance/cmd/holdfast-conformance \
		./plugins/etcd/cmd/holdfast-backend-etcd ./plugins/redis/cmd/holdfast-backend-redis ./plugins/postgres/cmd/holdfast-backend-postgres

.PHONY: web-build
web-build: ## build the live view (web/) into server/internal/ui/dist, which the holdfast binary embeds
	bash scripts/setup.d/60-web.sh
	cd web && node build.mjs

.PHONY: test-web
test-web: build ## live view end to end: headless Chromium (Playwright) against a real holdfast serve; screenshot in web/artifacts/
	bash scripts/setup.d/60-chromium.sh
	cd web && npm run typecheck && npm test

.PHONY: run
run: build ## run the server on the embedded memory backend at 127.0.0.1:7410
	$(BIN)/holdfast serve

# The protos as last released, as a buf image: `buf breaking` compares the
# working tree with it, so that holdfast.lock.v1 (the public API) and
# holdfast.backend.v1 (the contract with third-party plugins) change only
# compatibly. There is no release yet: until the first one, it holds the
# protos as they will first ship. The release process runs
# `make proto-baseline` when it tags a release and commits the result; in
# between, it is the promise made to clients and plugin authors.
PROTO_BASELINE := buf.released.yaml

.PHONY: lint
# golangci-lint (.golangci.yml: staticcheck, errcheck, revive, errorlint and
# more, with gofmt) over the workspace modules in one run, then bench and tools
# (outside go.work) on their own. Each module is also built and vetted alone
# (GOWORK=off), from its own go.mod and go.sum, so go.work cannot hide a
# missing requirement; its siblings come from this checkout through a
# temporary go.mod (holdfast-release standalone; CONTRIBUTING.md says why).
lint: tools ## buf lint and buf breaking (against $(PROTO_BASELINE)), golangci-lint over every Go module, each module built alone (GOWORK=off), one version everywhere, lint-ts and lint-python
	$(BIN)/buf lint
	$(BIN)/buf breaking --against $(PROTO_BASELINE)
	@out=$$(gofmt -l scripts/release); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/holdfast-release check
	$(BIN)/golangci-lint run $(addprefix ./,$(addsuffix /...,$(GO_MODULES)))
	cd bench && GOWORK=off $(BIN)/golangci-lint run ./...
	cd tools && GOWORK=off $(BIN)/golangci-lint run ./...
	@for m in $(GO_MODULES); do echo "build and vet $$m alone"; \
		$(BIN)/holdfast-release standalone $$m -- go build ./... && $(BIN)/holdfast-release standalone $$m -- go vet ./... || exit 1; done
	$(MAKE) --no-print-directory lint-ts
	$(MAKE) --no-print-directory lint-python

.PHONY: proto-baseline
proto-baseline: tools ## record the protos as released ($(PROTO_BASELINE)), the baseline of buf breaking: run when tagging a release
	$(BIN)/buf build --exclude-source-info -o $(PROTO_BASELINE)

.PHONY: lint-ts
lint-ts: ## eslint (typescript-eslint, strict) and tsc --strict for sdk-ts and web; no import cycles in the SDK; its shipped typings compiled without the DOM lib
	bash scripts/setup.d/40-node.sh
	bash scripts/setup.d/60-web.sh
	cd sdk-ts && npm run lint
	cd web && npm run lint

.PHONY: lint-python
lint-python: sdk-codegen-tools ## ruff (lint and format check) and mypy --strict over sdk-python (pinned in its hashed lock)
	cd sdk-python && .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

.PHONY: test-go
# The SDK matrix (every SDK on every backend) is test-sdk-conformance's:
# test-go leaves it out rather than run its memory rows twice.
test-go: build ## go test -race across the Go modules that need no external service (and a smoke of the mutation driver)
	@for m in $(GO_UNIT_MODULES); do echo "== go test $$m"; \
		(cd $$m && HOLDFAST_CONFORMANCE_BACKENDS=memory $(GO_TEST) -skip '^TestSDKConformance$$' ./...); done
	@echo "== go test tools/mutation"; cd tools && GOWORK=off $(GO_TEST) ./mutation

.PHONY: test
# Every suite, service-free first. Each backend target starts its own
# throwaway server and stops it by PID.
TEST_SUITES := test-go fuzz-smoke test-example test-etcd test-redis test-postgres test-sdk-conformance test-chaos test-abuse test-sdk-ts test-sdk-python test-web bench-smoke test-release test-ops
test: setup check-generated lint build ## set up and run the whole test suite (what CI runs)
	@for t in $(TEST_SUITES); do echo "===== make $$t"; $(MAKE) --no-print-directory $$t; done
	@echo "make test: all suites passed ($(TEST_SUITES))"

.PHONY: test-conformance
test-conformance: build ## conformance suite on the memory backend (both levels), the command, and the broken backends it must catch
	cd conformance && $(GO_TEST) ./...

.PHONY: test-example
test-example: ## the example backend (plugins/example) through the one command a backend author runs
	go build -o $(BIN)/ ./conformance/cmd/holdfast-conformance ./plugins/example/cmd/holdfast-backend-example
	$(BIN)/holdfast-conformance backend --plugin ./bin/holdfast-backend-example

.PHONY: mutation
# The suite's own strength: mutants of plugins/example and plugins/memory
# (tools/mutation), each built into its plugin and run through
# holdfast-conformance backend. Long (about half an hour on 2 cores), so not
# in make test; test-go runs a one-mutant smoke of the driver.
MUTATION_FLAGS ?=
mutation: build ## mutation testing of plugins/example and plugins/memory through holdfast-conformance backend (score, survivors: bin/mutation.md); MUTATION_FLAGS=-targets example, -only ID, -j N
	cd tools && GOWORK=off go run ./mutation -repo $(CURDIR) -bin $(BIN) -report $(BIN)/mutation.md $(MUTATION_FLAGS)

.PHONY: test-sdk-conformance
test-sdk-conformance: build sdk-codegen-tools ## SDK-level conformance: the Go, TypeScript and Python SDKs on memory, etcd, Redis and PostgreSQL (throw-away servers, 3 cells at a time); prints the 3 x 4 matrix
	bash scripts/setup.d/10-etcd.sh
	bash scripts/setup.d/20-redis.sh
	@matrix=$$(mktemp); status=0; \
	scripts/with-services.sh env HOLDFAST_SDK_MATRIX_FILE="$$matrix" bash -c 'cd conformance && $(GO_TEST) -run "^TestSDKConformance$$" .' || status=$$?; \
	cat "$$matrix"; rm -f "$$matrix"; exit $$status

.PHONY: test-redis
test-redis: build ## Redis backend, conformance (both levels; the backend level on its own volatile and appendfsync-always Redis, restarted) and two-server tests against a throw-away redis-server (scripts/redis.sh)
	bash scripts/setup.d/20-redis.sh
	go build -o $(BIN)/ ./plugins/redis/cmd/holdfast-backend-redis
	@dir=$$(mktemp -d); trap '$(CURDIR)/scripts/redis.sh stop "$$dir"; rm -rf "$$dir"' EXIT; \
	env_line=$$($(CURDIR)/scripts/redis.sh start "$$dir"); export "$$env_line"; echo "$$env_line"; \
	cd plugins/redis && $(GO_TEST) ./...

.PHONY: test-etcd
test-etcd: build ## etcd backend, conformance and scale-out tests against a throw-away etcd (scripts/etcd.sh)
	bash scripts/setup.d/10-etcd.sh
	go build -o $(BIN)/ ./plugins/etcd/cmd/holdfast-backend-etcd
	@dir=$$(mktemp -d); trap '$(CURDIR)/scripts/etcd.sh stop "$$dir"; rm -rf "$$dir"' EXIT; \
	env_line=$$($(CURDIR)/scripts/etcd.sh start "$$dir"); export "$$env_line"; echo "$$env_line"; \
	(cd plugins/etcd && $(GO_TEST) ./...)

# UPGRADE_FROM: the revision whose etcd plugin runs beside this one in
# test-etcd-upgrade (default: the last commit before the Release that
# compares revisions).
UPGRADE_FROM ?= a063eb1

.PHONY: test-etcd-upgrade
test-etcd-upgrade: ## rolling upgrade: the etcd plugin of UPGRADE_FROM (a git revision) beside this one on one throw-away etcd (scaleout TestMixedVersions)
	go build -o $(BIN)/ ./plugins/etcd/cmd/holdfast-backend-etcd
	@dir=$$(mktemp -d); trap '$(CURDIR)/scripts/etcd.sh stop "$$dir/etcd"; rm -rf "$$dir"' EXIT; \
	mkdir "$$dir/old" "$$dir/etcd" && git archive $(UPGRADE_FROM) | tar -x -C "$$dir/old" && \
	(cd "$$dir/old" && go build -o "$$dir/" ./plugins/etcd/cmd/holdfast-backend-etcd) && \
	env_line=$$($(CURDIR)/scripts/etcd.sh start "$$dir/etcd") && export "$$env_line" && \
	(cd plugins/etcd/scaleout && HOLDFAST_ETCD_OLD_PLUGIN="$$dir/holdfast-backend-etcd" $(GO_TEST) -run '^TestMixedVersions$$' -v .)

.PHONY: test-postgres
test-postgres: build ## PostgreSQL backend tests against a throw-away PostgreSQL (scripts/postgres.sh)
	go build -o $(BIN)/ ./plugins/postgres/cmd/holdfast-backend-postgres
	@dir=$$(mktemp -d); trap '$(CURDIR)/scripts/postgres.sh stop "$$dir"; rm -rf "$$dir"' EXIT; \
	env_line=$$($(CURDIR)/scripts/postgres.sh start "$$dir"); export "$$env_line"; \
	echo "postgres: test server up on $${env_line##*@} (HOLDFAST_POSTGRES_DSN exported)"; \
	(cd plugins/postgres && $(GO_TEST) ./...)

.PHONY: test-chaos
# Short seeded fault-injection runs (chaos/): each backend with its own
# etcd/Redis/PostgreSQL started by scripts/, histories checked with porcupine
# (locks, a semaphore and a read-write lock, each against its own model);
# prints the figures per backend and primitive.
test-chaos: build ## fault-injection runs on every backend, checked with porcupine (DURATION=15s per backend, SEED=n)
	bash scripts/setup.d/10-etcd.sh
	@report=$$(mktemp); status=0; \
	(cd chaos && HOLDFAST_CHAOS_DURATION=$(or $(DURATION),15s) HOLDFAST_CHAOS_SEED=$(SEED) \
		HOLDFAST_CHAOS_REPORT_FILE="$$report" $(GO_TEST) ./...) || status=$$?; \
	cat "$$report"; rm -f "$$report"; exit $$status

.PHONY: test-abuse
# Hostile clients against the real binary (abuse/): each attack is refused
# or ended, and a normal client's Acquire p50 during it stays within a
# stated multiple of its idle p50; prints both per attack.
test-abuse: build ## attacks from loopback against the real binary: each is refused, and a normal client's Acquire p50 stays near its idle p50
	@report=$$(mktemp); status=0; \
	(cd abuse && HOLDFAST_ABUSE_REPORT_FILE="$$report" $(GO_TEST) ./...) || status=$$?; \
	cat "$$report"; rm -f "$$report"; exit $$status

.PHONY: chaos
chaos: build ## longer fault-injection run: make chaos DURATION=5m [SEED=n] [BACKENDS=etcd,redis]
	bash scripts/setup.d/10-etcd.sh
	cd chaos && HOLDFAST_CHAOS_DURATION=$(or $(DURATION),5m) HOLDFAST_CHAOS_SEED=$(SEED) \
		HOLDFAST_CHAOS_BACKENDS=$(BACKENDS) \
		go test -race -count=1 -timeout 0 -v -run 'TestChaos$$' .

.PHONY: setup
setup: ## install what the tests need (services, Node and Python packages) if missing
	scripts/setup.sh

.PHONY: bench
BENCH_FLAGS ?=
bench: build ## benchmarks against the direct clients, ratios measured in the same run (results also in bin/bench.json)
	scripts/with-services.sh bash -c 'cd bench && GOWORK=off go run . -bin $(BIN) -json $(BIN)/bench.json \
		-etcd "$$HOLDFAST_ETCD_ENDPOINTS" -redis "$$HOLDFAST_REDIS_ADDR" -postgres "$$HOLDFAST_POSTGRES_DSN" $(BENCH_FLAGS)'

# module:package:FuzzTarget, each run for FUZZTIME (go test runs one fuzz
# target at a time); the seed corpora are in each package's testdata/fuzz.
# FUZZTIME is a count of executions, not a duration: Go before 1.27 can fail a
# duration-bounded run with a bare "context deadline exceeded" and no crasher
# when the deadline passes while a worker is mid-input (go.dev/issue/75804;
# seen in CI on a loaded machine). 50000 inputs take 3-15 s per target here.
# A long campaign: make fuzz-smoke FUZZTIME=2000000x.
FUZZ_TARGETS := core:./engine:FuzzAcquireValidation core:./engine:FuzzRequestValidation \
	core:./internal/wire:FuzzDecodeResponses server:./internal/auth:FuzzAuthorize server:./internal/auth:FuzzTokensFile
FUZZTIME ?= 50000x

.PHONY: fuzz-smoke
fuzz-smoke: ## run each fuzz target for FUZZTIME executions (default 50000x): request validation, plugin answers, token namespaces
	@for t in $(FUZZ_TARGETS); do IFS=: read -r mod pkg fn <<<"$$t"; echo "fuzz $$mod $$pkg $$fn ($(FUZZTIME))"; \
	(cd $$mod && go test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg) || exit 1; done

.PHONY: bench-smoke
bench-smoke: ## a short run of make bench, so it cannot rot
	$(MAKE) bench BENCH_FLAGS="-duration 200ms -hot-duration 500ms -footprint-locks 2000 -footprint-waiters 500 -footprint-loop 2000"

.PHONY: set-version
set-version: tools ## make every go.mod, go.work, version constant and SDK manifest say VERSION (or TO=X.Y.Z: write VERSION first)
	$(BIN)/holdfast-release set-version $(TO)

.PHONY: tidy
tidy: tools ## go mod tidy every module on its own (GOWORK=off, siblings from this checkout)
	@for m in $(GO_MODULES); do echo "tidy $$m"; $(BIN)/holdfast-release tidy $$m; done

# ---- release: dist/ holds what a release publishes (CONTRIBUTING.md) ----

# module directory:command, for dist/bin.
DIST_COMMANDS := server:holdfast plugins/memory:holdfast-backend-memory plugins/etcd:holdfast-backend-etcd \
	plugins/redis:holdfast-backend-redis plugins/postgres:holdfast-backend-postgres \
	plugins/example:holdfast-backend-example conformance:holdfast-conformance
DIST_PLATFORMS := linux/amd64 linux/arm64 darwin/arm64
# The SDK packages' targets (sdk-ts, sdk-python); dist runs each one defined.
DIST_SDK_TARGETS := dist-npm dist-python

.PHONY: dist
dist: dist-goproxy dist-bin dist-sdk dist-oci dist-deb ## write the release into dist/: goproxy/ (Go modules), bin/ (binaries + SHA256SUMS), npm/, python/, oci/ (container image), deb/ (Debian package)
	@echo "dist: release $(RELEASE_VERSION) in $(DIST)"

.PHONY: dist-goproxy
dist-goproxy: tools ## dist/goproxy: a file-system Go module proxy with every shipped module at VERSION
	$(BIN)/holdfast-release goproxy -out $(DIST)/goproxy

.PHONY: dist-bin
# Each command is built from its own module's go.mod (GOWORK=off, the
# dependency versions `go install …@vVERSION` selects), statically, without
# local paths, with the live view embedded.
dist-bin: tools web-build ## dist/bin: holdfast, every plugin and holdfast-conformance for linux/amd64, linux/arm64, darwin/arm64, with SHA256SUMS
	rm -rf $(DIST)/bin
	@for p in $(DIST_PLATFORMS); do for c in $(DIST_COMMANDS); do \
		os=$${p%/*}; arch=$${p#*/}; dir=$${c%%:*}; cmd=$${c#*:}; echo "dist-bin: $$os/$$arch $$cmd"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(BIN)/holdfast-release standalone $$dir -- \
			go build -trimpath -o $(DIST)/bin/$$os-$$arch/$$cmd ./cmd/$$cmd || exit 1; \
	done; done
	cd $(DIST)/bin && sha256sum */* > SHA256SUMS && cat SHA256SUMS

.PHONY: dist-sdk
dist-sdk: ## dist/npm and dist/python, through the SDK packages' own targets (skipped, saying so, while one is not defined)
	@for t in $(DIST_SDK_TARGETS); do \
		if grep -qE "^$$t:" $(MAKEFILE_LIST); then $(MAKE) --no-print-directory $$t || exit 1; \
		else echo "dist: no '$$t' target yet: skipping it (dist/$${t#dist-} not written)"; fi; done

.PHONY: test-release
# What a release's users do, from fresh projects outside the checkout, with
# only dist/ and the public registries (scripts/release/). It needs the module
# proxy and the SDK packages, not the cross-compiled binaries.
test-release: dist-goproxy dist-sdk ## install the release from dist/ into fresh projects and use it (Go; npm and Python when their scripts exist)
	cd tools && GOWORK=off $(GO_TEST) ./release
	scripts/release/test-release.sh $(DIST)

.PHONY: clean
clean: ## remove build outputs
	rm -rf $(BIN) $(DIST)

# ---- operators: the container image, the Debian package, the Kubernetes
# manifests and alert rules (deploy/, docs/operating.md) ----

# The Linux platforms of the release; the image and the package carry
# dist-bin's binaries of holdfast (with the embedded memory backend) and the
# other backend plugins, static.
OPS_PLATFORMS = $(filter linux/%,$(DIST_PLATFORMS))
OPS_COMMANDS  := holdfast holdfast-backend-etcd holdfast-backend-redis holdfast-backend-postgres
# Image and file times: the last commit's (reproducible builds).
OPS_DATE      := $(shell git log -1 --format=%ct 2>/dev/null || date +%s)

.PHONY: ops-tools
ops-tools: ## install what the operators' artifacts need: podman, runc, systemd-nspawn and a Debian to boot; holdfast-image, nfpm, kustomize, kubectl-validate, promtool into bin/
	bash scripts/setup.d/70-ops.sh

.PHONY: dist-oci
dist-oci: ops-tools dist-bin ## dist/oci: the container image, FROM scratch, an OCI archive per Linux platform (holdfast-VERSION-linux-ARCH.oci.tar)
	@mkdir -p $(DIST)/oci
	@for p in $(OPS_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
		SOURCE_DATE_EPOCH=$(OPS_DATE) $(BIN)/holdfast-image -platform $$p -version $(RELEASE_VERSION) \
			-revision $$(git rev-parse HEAD) -out $(DIST)/oci/holdfast-$(RELEASE_VERSION)-$$os-$$arch.oci.tar \
			$(addprefix $(DIST)/bin/$$os-$$arch/,$(OPS_COMMANDS)) || exit 1; done
	cd $(DIST)/oci && sha256sum *.oci.tar > SHA256SUMS

.PHONY: dist-deb
dist-deb: ops-tools dist-bin ## dist/deb: the Debian package with a hardened systemd unit, per Linux platform (holdfast_VERSION_ARCH.deb)
	@mkdir -p $(DIST)/deb
	@for p in $(OPS_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
		SOURCE_DATE_EPOCH=$(OPS_DATE) VERSION=$(RELEASE_VERSION) DEB_ARCH=$$arch BIN_DIR=$(DIST)/bin/$$os-$$arch \
			$(BIN)/nfpm package --config deploy/debian/nfpm.yaml --packager deb --target $(DIST)/deb/ || exit 1; done
	cd $(DIST)/deb && sha256sum *.deb > SHA256SUMS

.PHONY: test-ops
# This machine's platform and the commands the image and package carry
# only, to stay within a few minutes, into a dist of its own (a release in
# dist/ is left alone). The Debian package is installed into this machine's
# root and purged again.
OPS_TEST_DIST := $(DIST)/test-ops
test-ops: tools ## the image (archive; run under podman), the .deb (dpkg -i here, and under systemd in systemd-nspawn; purged), Kubernetes manifests (kustomize, kubectl-validate), alert rules (promtool)
	bash scripts/setup.d/10-etcd.sh
	$(MAKE) --no-print-directory dist-oci dist-deb DIST=$(OPS_TEST_DIST) \
		DIST_PLATFORMS=$$(go env GOOS)/$$(go env GOARCH) DIST_COMMANDS="$(filter %:holdfast $(addprefix %:,$(OPS_COMMANDS)),$(DIST_COMMANDS))"
	cd tools/ops && GOWORK=off $(BIN)/golangci-lint run ./... && GOWORK=off HOLDFAST_OPS_DIST=$(OPS_TEST_DIST) $(GO_TEST) -timeout 10m ./...
