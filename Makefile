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

.PHONY: setup demo test bench clean

# the engine's gRPC stubs, generated from proto/ (build outputs: never edited, never committed)
STUBS  := src/td3sched/engine/v1/engine_pb2.py
PROTOS := $(wildcard proto/td3sched/engine/v1/*.proto)

setup: $(STAMP) $(STUBS)

$(STUBS): $(PROTOS) $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=src --grpc_python_out=src --pyi_out=src $(PROTOS)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# benchmark-only dependencies (Stable-Baselines3), on top of the dev setup
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

# the shipped dlrm TD3 models (tau chosen; tau fixed at 0; see docs/td3.md) against the default kube-scheduler on tiny's
# held-out test span, 3 seeds; the full report lands in results/demo/
demo: setup
	rm -rf results/demo  # afresh: runs of an older code version would not mix with this one's
	$(VENV)/bin/td3sched evaluate --scenario tiny --span test --seeds 3 --policies k8s-default,td3:models/td3-dlrm,td3:models/td3-dlrm-seed --out results/demo

test: setup
	$(PY) -m pytest -q

bench: $(BENCH_STAMP)
	$(PY) benchmarks/bench_sim.py
	$(PY) benchmarks/bench_queue.py
	$(PY) benchmarks/bench_train.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache src/td3sched/engine/v1
