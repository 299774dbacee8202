# sandbox-snapshot-operator. `make help` lists the targets.
#
# The two commands of the README:
#   make dev     a local cluster on loopback with the operator in it
#   make check   every test tier: verify, the tiers' own check (verify-tiers),
#                unit and table tests, containerd integration, control-plane
#                e2e (with the project's CRDs, then OpenSandbox's) and node e2e
#                (what CI runs)

SHELL := /usr/bin/env bash
GO ?= go

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## Install the Debian packages the cluster and the tests need (root).
	hack/install-deps.sh

.PHONY: build
build: ## Build the controller and the committer.
	$(GO) build ./...

.PHONY: test
test: ## Unit and table tests, with coverage.
	hack/test.sh

.PHONY: codegen
codegen: ## Regenerate pkg/client and the deepcopy code.
	hack/update-codegen.sh

.PHONY: verify
verify: ## gofmt, go vet, stale generated code, and the Helm chart (lint; renders config/).
	@out=$$(gofmt -l cmd pkg test hack/tools.go) || { echo "gofmt failed"; exit 1; }; \
	if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration,e2e,e2e_node,tierfail ./...
	hack/verify-codegen.sh
	hack/verify-chart.sh

.PHONY: verify-tiers
verify-tiers: ## Prove that a failing test fails each tier's target (seconds, no cluster).
	hack/verify-tiers.sh

.PHONY: test-integration
test-integration: ## The committer against real containerd and a loopback registry (root).
	test/test-integration.sh

.PHONY: tools
tools: ## Build and cache the cluster binaries and tkn, ko, crane, helm.
	hack/build-tools.sh

.PHONY: cluster-up cluster-down node-up node-down
cluster-up: ## Control plane on loopback, CRDs and config/ applied.
	test/cluster/cluster-up.sh
cluster-down: ## Stop the control plane and remove its state.
	test/cluster/cluster-down.sh
node-up: ## A one-node cluster with containerd, Tekton and the operator deployed with ko.
	test/cluster/node-up.sh
node-down: ## Stop the node and undo every change outside the repo.
	test/cluster/node-down.sh

.PHONY: dev
dev: deps ## The local default: cluster, operator, a sample snapshot (DEV_MODE=control-plane for no node).
	test/cluster/dev.sh

.PHONY: e2e
e2e: ## Control-plane e2e: the controller against a real kube-apiserver.
	test/e2e.sh

.PHONY: e2e-opensandbox
e2e-opensandbox: ## The control-plane e2e under OpenSandbox's own CRDs (SNAPSHOT_CRDS=opensandbox).
	SNAPSHOT_CRDS=opensandbox test/e2e.sh

.PHONY: e2e-node
e2e-node: ## Node e2e: snapshot a live pod with real Tekton and resume from it (also under OpenSandbox's CRDs).
	test/e2e-node.sh

.PHONY: release
release: ## Images for linux/amd64 and arm64, release.yaml and the Task bundle (KO_DOCKER_REPO=...; docs/release.md).
	hack/release.sh

.PHONY: bench-committer bench-control-plane bench-cycles bench-hibernate bench-latency
bench-committer: ## Pause window and commit+push time against nerdctl.
	test/bench/committer/run.sh
bench-control-plane: ## Snapshot throughput and latency for N=100, 500, 1000, beside OpenSandbox's controller.
	test/bench/controlplane/run.sh
bench-cycles: ## 200 pause -> resume cycles of one sandbox on the real node (root).
	test/bench/cycles/run.sh
bench-hibernate: ## Memory snapshots of 64 MiB, 256 MiB and 1 GiB: freeze, size, restore (root).
	test/bench/hibernate/run.sh
bench-latency: ## A snapshot's create -> Succeed on the real node, stage by stage, against a no-op TaskRun (root).
	test/bench/latency/run.sh

.PHONY: ci-timing
ci-timing: ## .ci/run in a fresh clone with empty Go and tool caches; prints each tier's time (root; about an hour).
	hack/ci-timing.sh

.PHONY: check
check: deps verify verify-tiers test test-integration e2e e2e-opensandbox e2e-node ## Every test tier (CI runs this).
