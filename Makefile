# prereg-kit — everything installs into the current Python environment (use a venv if you like:
# `python3 -m venv .venv && . .venv/bin/activate` before `make`).
PYTHON ?= python3
# CPU wheel of torch; a plain `torch` requirement could pull a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
DEMO_DIR ?= build/demo
PREREG = $(PYTHON) -m prereg_kit

.PHONY: install demo test figures clean

.make-installed: pyproject.toml
	$(PYTHON) -m pip install -q "$(TORCH_PIN)"
	$(PYTHON) -m pip install -q -e ".[dev,train]"
	@touch $@

install: .make-installed

# The built-in example: the CPU study registry/cpu-grpo (tiny model, synthetic task), copied to
# $(DEMO_DIR): lock, simulate (dry run), train every configuration x seed, analyze, report.
demo: .make-installed
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	cp registry/cpu-grpo/plan.toml $(DEMO_DIR)/plan.toml
	$(PREREG) lock $(DEMO_DIR)/plan.toml
	$(PREREG) verify $(DEMO_DIR)
	$(PREREG) dry-run $(DEMO_DIR) --effect C1=0.04 --repeat 20
	$(PREREG) run $(DEMO_DIR)
	$(PREREG) analyze $(DEMO_DIR)
	@echo "report: $(DEMO_DIR)/report/report.md"

test: .make-installed
	$(PYTHON) -m pytest

figures: .make-installed
	$(PYTHON) -m figures

clean:
	rm -rf build figures/out .make-installed
