# Every target creates .venv when it is missing and installs torch (CPU build) before the package,
# so that pip never resolves a bare `torch` into the CUDA wheels.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
EXTRAS ?= vizdoom,mujoco,atari,envpool,profiling,wandb,ray,pettingzoo,export,huggingface,dev

.PHONY: venv train lint test test-slow bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed

train: venv
	$(PY) -m sf_examples.train_gym_env --env=CartPole-v1 --serial_mode=True --async_rl=False \
		--train_for_env_steps=50000 --experiment=make_train --restart_behavior=overwrite --seed=1

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=15

test-slow: venv
	$(PY) -m pytest -q -m slow -o addopts="--benchmark-disable"

bench: venv
	$(PY) -m pytest -q benchmarks -o addopts="" --benchmark-only --benchmark-enable

clean:
	rm -rf $(VENV) train_dir .pytest_cache
