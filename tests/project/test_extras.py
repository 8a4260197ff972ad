"""Optional packages: each one imported is declared in the extra its error names, a missing one is
one line naming that extra, and a run's meta.json records the versions of those installed."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from paths import ROOT

from prereg_kit.errors import MissingExtraError, PreregError

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
# module imported → (distribution, the extra its error names)
OPTIONAL = {"numba": ("numba", "analyses"), "math_verify": ("math-verify", "math"), "datasets": ("datasets", "hub"),
            "wandb": ("wandb", "wandb"), "mlflow": ("mlflow-skinny", "mlflow"), "tensorboard": ("tensorboard", "tensorboard")}


def _dists(extra: str) -> set[str]:
    return {req.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for req in EXTRAS[extra]}


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_optional_import_is_declared_in_its_extra():
    users: dict[str, list[str]] = {m: [] for m in OPTIONAL}
    for pkg in ("prereg_kit", "trainer", "analyses", "figures", "examples"):
        for path in (ROOT / pkg).rglob("*.py"):
            for m in _imported_modules(path) & set(OPTIONAL):
                users[m].append(str(path.relative_to(ROOT)))
    assert users["numba"] == ["analyses/tabular.py"] and users["math_verify"] and users["datasets"], users
    for module, (dist, extra) in OPTIONAL.items():
        assert dist in _dists(extra), (module, extra, EXTRAS.get(extra))
    assert all(not any("==" in r for r in reqs) for reqs in EXTRAS.values())  # ranges, never pins
    assert "fast" not in EXTRAS  # the old name of `analyses`, documented nowhere


def _installs(target: str) -> set[str]:
    """The extras the Makefile's install rule ``target`` gives pip (``$(PIP) -e ".[a,b]"``)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{target}:"))
    line = next(ln for ln in lines[start + 1:] if '-e ".[' in ln)
    return set(line.split("[", 1)[1].split("]", 1)[0].split(","))


def test_the_makefile_installs_the_extras_the_tests_import():
    installed = _installs(".make-installed")
    assert set(EXTRAS) >= installed  # no near-miss name pip would ignore with a warning
    assert {"analyses", "hub", "dev"} <= installed  # numba (test_tabular), datasets (test_data)


def test_the_demo_installs_only_what_it_imports():
    """`make demo` trains the built-in example: the core and the train extra, nothing else."""
    assert _installs(".make-demo-installed") == {"train"}
    mk = (ROOT / "Makefile").read_text()
    assert "demo: .make-demo-installed" in mk and "pip install -q" not in mk  # pip's own progress
    assert "TORCH_SPEC ?= 'torch>=2.4'" in mk  # a range: torch only where it is missing, never a pin


def test_tabular_imports_without_numba_and_its_recursion_names_the_extra():
    """numba blocked in a fresh interpreter: the module imports, numpy parts agree, the recursion refuses."""
    code = """
import sys
sys.modules["numba"] = None  # import numba -> ImportError
import numpy as np
from analyses import tabular as t
m = t.conditional_mean_advantages((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4)
print(repr(np.asarray(m).tolist()))
for call in (lambda: t.iterations_to_reach((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4, alpha=1.0,
                                           action=1, threshold=0.5, max_iter=10),
             lambda: t.run_recursion((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4, alpha=1.0, steps=3)):
    try:
        call()
    except ImportError as e:
        print(e)
# the uncompiled kernel computes the same numbers: the refusal is about time, not results
args = t._prepare((0.8, 0.01, 0.19), "grpo", 0.2, 0.5, 4, 1.0)
traj = np.empty((3, 3))
t._recurse(*args, 0.5, 40, -1, 2.0, np.array([0, 7, 40]), traj)
print(repr(traj.tolist()))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1:3] == ["the tabular recursion needs numba: pip install 'prereg-kit[analyses]'"] * 2
    import numpy as np

    from analyses.tabular import conditional_mean_advantages, run_recursion

    with_numba = conditional_mean_advantages((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4)
    assert eval(lines[0]) == np.asarray(with_numba).tolist()  # our own repr of floats
    _, traj = run_recursion((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4, alpha=0.5, steps=40,
                            record_at=[0, 7, 40])
    assert eval(lines[3]) == traj.tolist() and traj[-1, 2] > 0.19  # equal to the last bit


def _blocked(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)


def test_a_missing_math_verify_is_one_line_naming_the_math_extra(monkeypatch):
    from trainer.data.verifiers import VerifierUnavailableError, get_verifier

    _blocked(monkeypatch, "math_verify")
    with pytest.raises(VerifierUnavailableError) as ei:
        get_verifier("math_verify")
    e = ei.value
    assert isinstance(e, PreregError) and isinstance(e, ImportError) and isinstance(e, ValueError) and e.exit_code == 2
    assert e.lines == ["verifier 'math_verify' needs the math-verify package, which is not installed: "
                       "pip install 'prereg-kit[math]'"]
    assert "math" in EXTRAS


def test_a_missing_datasets_is_one_line_naming_the_hub_extra(monkeypatch):
    from trainer.data.problems import DataError, HubUnavailableError, load_hub

    _blocked(monkeypatch, "datasets")
    with pytest.raises(HubUnavailableError) as ei:
        load_hub("no/such-dataset", split="train")
    e = ei.value
    assert isinstance(e, DataError) and isinstance(e, MissingExtraError) and len(e.lines) == 1
    assert e.lines[0].startswith("dataset 'no/such-dataset' from the hub needs the datasets package")
    assert e.lines[0].endswith("pip install 'prereg-kit[hub]'") and "hub" in EXTRAS


def test_a_run_records_the_optional_packages_installed(monkeypatch):
    pytest.importorskip("torch")
    import importlib.metadata

    import trainer.loop as loop
    from prereg_kit.runlog import RunMeta

    found = loop.optional_packages()
    assert set(found) <= set(loop.OPTIONAL_PACKAGES)
    assert found.get("numba") == importlib.metadata.version("numba")  # installed here (the dev extra)
    # absent modules and modules without a distribution are left out, never guessed
    monkeypatch.setattr(loop, "OPTIONAL_PACKAGES", {"numba": "numba", "no_such_module_xyz": "no-such-module-xyz",
                                                    "json": "json-is-no-distribution"})
    assert loop.optional_packages() == {"numba": importlib.metadata.version("numba")}
    meta = RunMeta(study="s", configuration="c", seed=0, plan_hash="h", started_at="2026-01-01T00:00:00Z",
                   packages={"numba": "0.61.0"})
    assert RunMeta.model_validate_json(meta.model_dump_json()).packages == {"numba": "0.61.0"}
    assert "packages=optional_packages()" in Path(loop.__file__).read_text()  # setup() writes it into meta.json
