# Development entry points. `make simulate` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROVIDERS := $(wildcard providers/*/pyproject.toml)

.PHONY: setup simulate test lint unit slow integration cluster-build chart

$(BIN)/karpenter: pyproject.toml $(PROVIDERS) conformance/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "setuptools>=77"
	$(BIN)/pip install --quiet -e '.[dev]' $(foreach p,$(PROVIDERS),-e $(dir $(p))) -e 'conformance[docker]'
	touch $@

setup: $(BIN)/karpenter

simulate: setup
	$(BIN)/karpenter simulate

# mypy checks the packages listed in pyproject.toml [tool.mypy] (tests and benchmarks are left out).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The fast tier: no cluster, no moto, no fake ARM server, no subprocesses; controllers run
# against the in-process fake Kubernetes API (karpenter_conformance.fakekube).
unit: setup
	$(BIN)/pytest -m "not integration and not slow" -n auto

# The slow tier: tests on a moto server or the Azure fake ARM server, pip installs and the
# karpenter command in subprocesses.
slow: setup
	$(BIN)/pytest -m "slow and not integration" -n auto

cluster-build: setup
	$(BIN)/python -m karpenter_conformance.cluster build

integration: cluster-build
	$(BIN)/pytest -m integration

test: lint unit slow integration

# The Helm charts' CRDs and RBAC are generated from the core and the AWS provider's record
# (a unit test checks the committed files match). They are EKS's: the Azure and GCP providers'
# CRDs and RBAC are not in them (`karpenter crds` and `karpenter rbac --provider azure|gcp`
# print them).
chart: setup
	$(BIN)/karpenter chart --provider aws --charts-dir charts
