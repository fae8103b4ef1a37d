# Development entry points. `make simulate` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROVIDERS := $(wildcard providers/*/pyproject.toml)

.PHONY: setup simulate test lint unit integration cluster-build chart

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

unit: setup
	$(BIN)/pytest -m "not integration"

cluster-build: setup
	$(BIN)/python -m karpenter_conformance.cluster build

integration: cluster-build
	$(BIN)/pytest -m integration

test: lint unit integration

# The Helm chart carries copies of the CRDs and of the core's and the AWS provider's RBAC
# (a unit test checks they match).
chart: setup
	cp karpenter_core/crds/*.yaml providers/aws/karpenter_aws/crds/*.yaml charts/karpenter/crds/
	rm -f charts/karpenter/files/rbac/*.yaml
	$(BIN)/karpenter rbac --provider aws --output-dir charts/karpenter/files/rbac
