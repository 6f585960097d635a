# Every target does its own set-up on a fresh machine.
# TORCH pins the CPU build that this machine serves from a local file; on a GPU
# host run e.g. `make install TORCH=torch` (setup.cfg itself only asks torch>=2.10).
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
ACTORS ?= 4
ARGS ?=
# where make docs finds the run folders that docs/media/pictures.json names
RUNS ?= runs
# the agent make watch plays (docs/watch.md): none is published in the repository yet
AGENT ?= agents/mario-1-1.safetensors

.PHONY: install install-dev run test test-all lint docs bench watch clean

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

# constraints.txt holds the tools a release of theirs could turn red (tyro, ruff, mypy, kubernetes-validate) at tested versions
$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH)" "numpy<2; python_version < '3.13'"
	$(PY) -m pip install -q -c constraints.txt -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $@

# the published run: Mario 1-1 on the defaults to their 300K env-step budget, the final evaluation, best.mp4;
# ARGS adds options, e.g. make run ARGS="--total-env-steps 20000" (a short look) or "--total-env-steps 0" (no limit)
run: install
	$(PY) -m launch.local --actors $(ACTORS) $(ARGS)

# 2 workers (pytest-xdist), one test at a time each, the slow ones first (tests/conftest.py); every test is bounded
# by work (updates, env steps, events), not seconds, so it passes on a slow machine too, only later
test: install-dev lint
	$(PY) -m pytest -rs --durations=30 -n 2 --maxschedchunk 1

test-all: install-dev  # also the extended tests (Catch on uniform replay, the plug-in env learned), several minutes more
	$(PY) -m pytest -rs --durations=30 -n 2 --maxschedchunk 1 -m ""

lint: install-dev  # ruff's lint and format check, then mypy's type check, all configured in pyproject.toml
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

docs: install  # rewrite the generated pages in docs/ (option tables, protocol.md, the layout) and the README's pictures
	$(PY) -m launch.tools.gendocs
	$(PY) -m launch.tools.pictures --runs-root $(RUNS)

bench: install
	$(PY) -m launch.benchmark

# play the published agent once, greedily, and film it (watch.mp4); without the file it says so and exits with 1
# before installing anything (docs/watch.md: export one with python -m launch.tools.export RUN --out $(AGENT))
watch:
	@test -f "$(AGENT)" || { echo "make watch: no $(AGENT) here: no agent is published in this repository yet;" \
		"export a run's with: python -m launch.tools.export runs/<run> --out $(AGENT) (docs/watch.md)" >&2; exit 1; }
	$(MAKE) install
	$(PY) -m launch.evaluate --pretrained "$(AGENT)" --episodes 1 --epsilon 0 --low-epsilon-episodes 0 \
		--noop-episodes 0 --video watch.mp4 --video-episode greedy --json watch.json

clean:
	rm -rf $(VENV) build *.egg-info
