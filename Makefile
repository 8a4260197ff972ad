# prereg-kit — everything installs into the current Python environment (use a venv if you like:
# `python3 -m venv .venv && . .venv/bin/activate` before `make`).
PYTHON ?= python3
# PyTorch is installed only when the environment has none, as TORCH_SPEC: by default PyPI's build
# (on Linux x86-64 it brings CUDA, several GB); a CPU-only build comes from PyTorch's own index:
#   make demo TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
TORCH_SPEC ?= 'torch>=2.4'
PIP = $(PYTHON) -m pip install
DEMO_DIR ?= build/demo
# the demo's study (examples/demo: registry/cpu-grpo at demo size) and its runs at once; the full
# CPU study: make demo DEMO_PLAN=registry/cpu-grpo/plan.toml DEMO_JOBS=1
DEMO_PLAN ?= examples/demo/plan.toml
DEMO_JOBS ?= 2
DEMO_REPEAT ?= 10
# anchor election of registry/cpu-multireward (how its committed election.json was made)
ELECT_ARGS ?= --seeds 0 --steps 12 --prompts 32 --samples 4
PREREG = $(PYTHON) -m prereg_kit

.PHONY: install demo trl-example check test test-slow test-clock bench bench-full figures cpu-studies registry-smoke clean

# torch only where it is missing (a torch the user has is kept, whatever its build)
.make-torch:
	@$(PYTHON) -c "import torch" 2>/dev/null && echo "torch: using the installed $$($(PYTHON) -c 'import torch; print(torch.__version__)')" \
	  || { echo "torch: installing $(TORCH_SPEC)"; $(PIP) $(TORCH_SPEC); }
	@touch $@

# what the demo imports: the core and the built-in trainer (the `train` extra)
.make-demo-installed: pyproject.toml .make-torch
	$(PIP) -e ".[train]"
	@touch $@

# development: every extra the tests use, and the source of verl 0.9.1 and OpenRLHF 0.11.2, whose own
# writer code writes the importers' test fixtures (tests/verlwriter.py, tests/openrlhfwriter.py).
# --no-deps: the writers need none of their dependencies (verl pins transformers<5.11); --target
# build/: both wheels also install a top-level `tests` package that would shadow this project's
# tests/. OpenRLHF's wheel is for CPython 3.11 only: elsewhere its test skips, naming this command.
.make-installed: pyproject.toml .make-torch
	$(PIP) -e ".[dev,train,trl,tensorboard,cluster,analyses,hub]"
	$(PIP) --no-deps --target build/verl-0.9.1 "verl==0.9.1"
	$(PIP) --no-deps --only-binary=:all: --target build/openrlhf-0.11.2 "openrlhf==0.11.2" \
	  || echo "openrlhf 0.11.2 could not be installed: its own-logger test will skip"
	@touch $@

install: .make-installed

# The built-in example: the demo study examples/demo (registry/cpu-grpo at demo size: tiny model,
# synthetic task, 4 seeds, B = 15K tokens), copied to $(DEMO_DIR): lock, simulate (dry run), train
# every configuration x seed ($(DEMO_JOBS) at once), analyze, report (`prereg analyze` prints its path); the time: README.
demo: .make-demo-installed
	@echo "make demo: $(DEMO_PLAN) in $(DEMO_DIR): lock, dry run, train, analyze (README: time, scaling up)"
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	cp $(DEMO_PLAN) $(DEMO_DIR)/plan.toml
	$(PREREG) lock $(DEMO_DIR)/plan.toml
	$(PREREG) verify $(DEMO_DIR)
	$(PREREG) dry-run $(DEMO_DIR) --effect C1=0.04 --repeat $(DEMO_REPEAT)
	$(PREREG) run $(DEMO_DIR) --jobs $(DEMO_JOBS)
	$(PREREG) analyze $(DEMO_DIR)

# Bring your own trainer: examples/trl_grpo copied to $(TRL_DIR), locked, its six runs trained by
# TRL's GRPOTrainer through PreregCallback (examples/trl_grpo/train.py), analyzed (`make install` brings the `trl` extra).
TRL_DIR ?= build/trl-example
trl-example: .make-installed
	rm -rf $(TRL_DIR) && mkdir -p $(dir $(TRL_DIR))
	cp -r examples/trl_grpo $(TRL_DIR)
	$(PREREG) lock $(TRL_DIR)/plan.toml
	for c in grpo frozen; do for s in 0 1 2; do \
	  $(PYTHON) $(TRL_DIR)/train.py $(TRL_DIR) --configuration $$c --seed $$s || exit 1; done; done
	$(PREREG) analyze $(TRL_DIR)

# The linter, with the rules pyproject.toml's [tool.ruff.lint] chooses (CI runs it before the tests).
check: .make-installed
	$(PYTHON) -m ruff check .

# The default suite (budget: 5 minutes on 2 idle cores); `make test-slow` runs the longer training
# tests (12 minutes). Both run on every core (TEST_WORKERS=0: one process); the tests that share a
# module's fixtures stay in one worker, so that each is built once (tests/conftest.py), the others go
# to whichever worker is free; the 20 slowest tests are printed.
# Budgets, last figures, how to run a part: docs/testing.md.
TEST_WORKERS ?= auto
PYTEST_ARGS ?= -n $(TEST_WORKERS) --dist loadgroup --durations=20
# bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, as in many
# containers): every worker, and every process a test starts, otherwise compiles the project and
# rewrites the test modules' asserts again (about 5 s of CPU per worker); __pycache__ is ignored by git
TEST_ENV = PYTHONDONTWRITEBYTECODE=
# A test that hangs fails by name after TEST_TIMEOUT seconds (SLOW_TEST_TIMEOUT in the slow step),
# and the run goes on, rather than holding CI to its limit; pytest's faulthandler prints every
# thread's stack at 9/10 of it, also for a hang the timeout cannot end (docs/testing.md). The default
# suite's longest test took under 10 s, the slow step's about 150 s, in CI.
TEST_TIMEOUT ?= 180
SLOW_TEST_TIMEOUT ?= 900
hang_guard = --timeout=$(1) -o faulthandler_timeout=$(shell expr $(1) \* 9 / 10)
test: .make-installed
	$(TEST_ENV) $(PYTHON) -m pytest -m "not slow" $(PYTEST_ARGS) $(call hang_guard,$(TEST_TIMEOUT))

test-slow: .make-installed
	$(TEST_ENV) $(PYTHON) -m pytest -m slow $(PYTEST_ARGS) $(call hang_guard,$(SLOW_TEST_TIMEOUT))

# The tests that read the clock (certificates, the lock chain, seals, runs, status, imports) with the
# system clock moved by faketime (Debian package faketime) to the 15th of every month of CLOCK_YEAR:
# no test may depend on today's date. The clock is moved by an offset, so that every process (openssl
# as the test TSA, git) reads the same time. The lease tests are left out: libfaketime breaks the
# timed waits of their heartbeat threads (EINVAL), and they read only ages, never dates.
CLOCK_YEAR ?= 2027
CLOCK_TESTS ?= tests/chain/test_timestamp.py tests/chain/test_lock.py tests/chain/test_integrity.py tests/study/test_status.py \
  tests/integrations/test_import_core.py tests/integrations/test_import_attacks.py tests/registry/test_record.py tests/study/test_audit.py tests/analysis/test_sequential_looks.py tests/runlog/test_runlog.py
test-clock: .make-installed
	@command -v faketime >/dev/null || { echo "make test-clock needs faketime (apt-get install faketime)"; exit 2; }
	for m in 01 02 03 04 05 06 07 08 09 10 11 12; do echo "== clock at $(CLOCK_YEAR)-$$m-15"; \
	  off=$$(( $$(date -d "$(CLOCK_YEAR)-$$m-15 12:00" +%s) - $$(date +%s) )); \
	  faketime -f "+$$off" \
	  $(PYTHON) -m pytest -m "not slow" -q -p no:cacheprovider $(CLOCK_TESTS) || exit 1; done

# Every benchmark of benchmarks/ (the GPU check aside) in its quick mode, each ratio beside its
# reference measured in the same run, then each script's wall and CPU time and the load average
# (benchmarks/run_all.py; docs/performance.md). About 2.5 minutes of CPU in all on 2 cores (budgeted
# at most 5); a script fails it only by exiting non-zero or by running past 10x its CPU budget
# (300 s at least), so a loaded machine does not: it passed at a load average of 5 in under 4 minutes.
bench: .make-installed
	$(PYTHON) benchmarks/run_all.py

# The same benchmarks at their full sizes, with no timeout: the sizes of the figures in
# docs/performance.md. Long: bench_loading.py's growth series writes and analyzes a 9,600-run study.
bench-full: .make-installed
	$(PYTHON) benchmarks/run_all.py --full

# Every table and figure into figures/out/ (index: figures/out/INDEX.md), from the CPU studies'
# committed run logs in registry/cpu-*/ read through the analysis; figures never train.
figures: .make-installed
	$(PYTHON) -m figures

# Retrain the CPU studies in place in the registry (complete runs are kept: delete
# registry/cpu-*/runs, plan.lock and election.json first to start over), then analyze each and
# write its reported record (cpu-gradient: its gradient test first). About 40 minutes on 2 cores from scratch.
CPU_STUDIES = cpu-grpo cpu-interventions cpu-multireward cpu-gradient
cpu-studies: .make-installed
	test -f registry/cpu-multireward/election.json || $(PREREG) elect registry/cpu-multireward $(ELECT_ARGS)
	for s in $(CPU_STUDIES); do \
	  $(PREREG) lock registry/$$s/plan.toml && \
	  { test -d registry/$$s/gradient || ! grep -q '^\[\[gradient_tests\]\]' registry/$$s/plan.toml || \
	    $(PREREG) gradient-test registry/$$s; } && $(PREREG) run registry/$$s && \
	  $(PREREG) analyze registry/$$s && $(PYTHON) -m prereg_kit.registry.record registry/$$s || exit 1; \
	done

# One iteration of every runnable registry configuration on a tiny CPU model (the plan's model,
# task and evaluation substituted; docs/trainer.md "Smoke-testing a plan on the tiny model").
registry-smoke: .make-installed
	$(PYTHON) -m trainer.smoke

clean:
	rm -rf build figures/out .make-installed .make-demo-installed .make-torch
