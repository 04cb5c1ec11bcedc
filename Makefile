# First command: `make demo` (sets up .venv if needed, runs the shipped TD3 model against k8s-default on tiny).
# Second command: `make test`.
PYTHON ?= python3
# The production traces (`td3sched traces` says where each comes from): $TD3SCHED_TRACES when set, else a
# `shared/traces` folder beside the checkout when there is one, else the per-user default of td3sched.
ifeq ($(TD3SCHED_TRACES),)
ifneq ($(wildcard ../shared/traces),)
export TD3SCHED_TRACES := $(abspath ../shared/traces)
endif
endif
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: setup lock demo test bench clean k8s-bin k8s-demo go-stubs go-test

# the engine's gRPC stubs, generated from proto/ (build outputs: never edited, never committed)
STUBS  := src/td3sched/engine/v1/engine_pb2.py
PROTOS := $(wildcard proto/td3sched/engine/v1/*.proto)

setup: $(STAMP) $(STUBS)

$(STUBS): $(PROTOS) $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=src --grpc_python_out=src --pyi_out=src $(PROTOS)

# constraints.txt pins every package to the versions the tests last passed with (make lock rewrites it)
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# after upgrading packages in .venv and passing `make test`: pin what is installed
lock: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# benchmark-only dependencies (Stable-Baselines3), on top of the dev setup
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,bench]'
	touch $(BENCH_STAMP)

# the shipped dlrm TD3 models (tau chosen; tau fixed at 0; see docs/td3.md) and the shipped static blend (the best
# score measured on dlrm-small and openb, as a model) against the default kube-scheduler on tiny's held-out test
# span, 3 seeds; the full report lands in results/demo/
demo: setup
	rm -rf results/demo  # afresh: runs of an older code version would not mix with this one's
	$(VENV)/bin/td3sched evaluate --scenario tiny --span test --seeds 3 --policies k8s-default,td3:models/td3-dlrm,td3:models/td3-dlrm-seed,td3:models/static-blend-dlrm-small,td3:models/static-spread-dlrm-small --out results/demo

test: setup
	$(PY) -m pytest -q

bench: $(BENCH_STAMP)
	$(PY) benchmarks/bench_sim.py
	$(PY) benchmarks/bench_queue.py
	$(PY) benchmarks/bench_train.py
	$(PY) benchmarks/bench_env_workers.py

# The Kubernetes control plane of the end-to-end tests (tests/k8s) and the td3-scheduler, built from
# scheduler/go.mod's dependency graph into build/k8s/<k8s.io/kubernetes version>/: the upstream
# binaries are rebuilt only when go.sum changes, td3-scheduler when a Go source changes.
K8S_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" && $$2 ~ /^v/ {print $$2; exit}' scheduler/go.mod)
K8S_BIN     := build/k8s/$(K8S_VERSION)
GO_SOURCES  := $(shell find scheduler -name '*.go' -not -name '*_test.go' 2>/dev/null)

k8s-bin: $(K8S_BIN)/etcd $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kube-scheduler $(K8S_BIN)/td3-scheduler

$(K8S_BIN)/etcd: scheduler/go.mod scheduler/go.sum
	cd scheduler && go build -o ../$@ go.etcd.io/etcd/server/v3
$(K8S_BIN)/kube-apiserver: scheduler/go.mod scheduler/go.sum
	cd scheduler && go build -o ../$@ k8s.io/kubernetes/cmd/kube-apiserver
$(K8S_BIN)/kube-scheduler: scheduler/go.mod scheduler/go.sum
	cd scheduler && go build -o ../$@ k8s.io/kubernetes/cmd/kube-scheduler
$(K8S_BIN)/td3-scheduler: scheduler/go.mod scheduler/go.sum $(GO_SOURCES)
	cd scheduler && go build -o ../$@ ./cmd/scheduler

# the Go gRPC stubs under scheduler/pkg/engine/v1 (committed), with the generators they were made with,
# installed from the Go module proxy into build/gobin
GOBIN_DIR := $(CURDIR)/build/gobin
go-stubs: $(STAMP)
	GOBIN=$(GOBIN_DIR) go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
	GOBIN=$(GOBIN_DIR) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
	PATH="$(GOBIN_DIR):$$PATH" $(PY) -m grpc_tools.protoc -Iproto --go_out=scheduler --go_opt=module=td3-scheduler/scheduler \
		--go-grpc_out=scheduler --go-grpc_opt=module=td3-scheduler/scheduler $(PROTOS)

# 50 fake nodes, 500 pods of the tiny scenario scheduled by the td3-scheduler, and where they went and why
k8s-demo: setup k8s-bin
	$(PY) -m tests.k8s.demo

go-test:
	cd scheduler && go vet ./... && go test ./...

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache src/td3sched/engine/v1
