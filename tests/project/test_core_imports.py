"""The core package imports without torch or the timestamp extra (DESIGN: heavy dependencies are optional extras)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE = ["prereg_kit", "prereg_kit.plan", "prereg_kit.chain.lock", "prereg_kit.study.verify", "prereg_kit.study.audit",
        "prereg_kit.runlog", "prereg_kit.readings", "prereg_kit.stats", "prereg_kit.analysis.analyze", "prereg_kit.report",
        "prereg_kit.simulate.dryrun", "prereg_kit.simulate.synth", "prereg_kit.cli", "prereg_kit.chain.timestamp", "prereg_kit.study.jobs",
        "prereg_kit.cli.runners"]


def _fresh_python(code: str, timeout: int = 180) -> str:
    """Run ``code`` in a new interpreter (nothing imported yet); its stdout, after a clean exit."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


BLOCKED = ('torch', 'transformers', 'vllm', 'rfc3161_client', 'asn1crypto', 'cryptography')


def _core_modules() -> list[str]:
    import pkgutil

    import prereg_kit

    # the integrations sit above the trainer (docs/architecture.md): not core
    return ["prereg_kit"] + sorted(m.name for m in pkgutil.walk_packages(prereg_kit.__path__, "prereg_kit.")
                                   if not m.name.startswith("prereg_kit.integrations"))


def _two_steps(core: list[str], every: list[str], path: str | None = None) -> dict:
    """One fresh interpreter's two steps. First, with torch, transformers, vllm and the timestamp
    extra blocked, it imports ``core`` ('ok'). Then, the block lifted, it imports ``every`` module
    and names those of the trainer or torch in sys.modules ('ok' if none) — and also any import of
    torch, transformers or vllm the block refused in the first step, since a fresh process would
    have loaded it there (the modules the first step cached are not imported again)."""
    code = (
        "import sys, importlib\n"
        f"sys.path[:0] = {[path] if path else []!r}\n"
        "tried = []\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {BLOCKED!r}:\n"
        "            tried.append(name)\n"
        "            raise ImportError(f'{name} is blocked in this test')\n"
        "block = Block()\n"
        "sys.meta_path.insert(0, block)\n"
        f"for m in {core!r}:\n"
        "    __import__(m)\n"
        "print('ok')\n"
        "sys.meta_path.remove(block)\n"
        f"for m in {every!r}:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError as e:\n"
        "        if e.name not in ('rfc3161_client', 'asn1crypto', 'cryptography'):\n"
        "            raise\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('trainer', 'torch'))\n"
        "bad += sorted(set(m for m in tried if m.split('.')[0] in ('torch', 'transformers', 'vllm')))\n"
        "print(','.join(bad) or 'ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    lines = [*res.stdout.strip().splitlines(), "", ""]  # a step that failed printed nothing
    return {"core": lines[0], "every": lines[1], "stderr": res.stderr, "rc": res.returncode}


@pytest.fixture(scope="module")
def imported() -> dict:
    """``CORE`` imported with the heavy extras blocked, then every core module (one process)."""
    mods = [m for m in _core_modules() if m != "prereg_kit.__main__"]
    return _two_steps(CORE, mods) | {"modules": len(mods)}


def test_a_torch_import_the_block_refused_counts_in_the_second_step(tmp_path):
    """A module that tries torch and carries on without it imports in the first step, and is cached
    there without torch; the second step still names it, as a fresh import would have loaded torch."""
    (tmp_path / "guarded.py").write_text("try:\n    import torch\nexcept ImportError:\n    pass\n")
    (tmp_path / "plain.py").write_text("import json\n")
    assert _two_steps(["guarded"], [], str(tmp_path))["every"] == "torch"
    assert _two_steps(["plain"], ["plain"], str(tmp_path))["every"] == "ok"


def test_core_imports_without_torch(imported):
    assert imported["core"] == "ok", imported["stderr"]


def test_no_core_module_loads_the_trainer_or_torch(imported):
    """Importing every prereg_kit module (the CLI included, with the commands it adds from the
    prereg_kit.commands entry points) loads neither the trainer nor torch: `prereg run` reaches a
    trainer only through the prereg_kit.runners entry point."""
    assert imported["rc"] == 0 and imported["every"] == "ok", imported
    assert imported["modules"] > 40  # the walk found the package's modules


def test_no_core_source_imports_the_trainer():
    """No import statement anywhere in prereg_kit (inside functions too) names the trainer package,
    but in the integrations, which sit above the trainer (docs/architecture.md)."""
    import ast
    from pathlib import Path

    import prereg_kit

    root = Path(prereg_kit.__file__).parent
    offenders = []
    for path in sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] != "integrations"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in ("trainer", "torch")]
    assert not offenders


def test_figures_leave_matplotlib_global_state_alone():
    """Importing the report's plots and every figure builder, and drawing a figure and writing
    one as the report does, selects no backend, loads no pyplot and changes no rcParams."""
    code = (
        "import sys, pkgutil, importlib, matplotlib\n"
        "def snapshot():  # reading rcParams['backend'] would itself resolve a backend through pyplot\n"
        "    return {k: dict.__getitem__(matplotlib.rcParams, k) for k in matplotlib.rcParams if k != 'backend'}\n"
        "backend, rc = matplotlib.rcParams._get_backend_or_none(), snapshot()\n"
        "import prereg_kit.report.plots as plots, figures\n"
        "for m in pkgutil.iter_modules(figures.__path__, 'figures.'):\n"
        "    importlib.import_module(m.name)\n"
        "fig, ax = plots.subplots(figsize=(2, 2))\n"
        "ax.plot([0, 1], [0, 1])\n"
        "import io; fig.savefig(io.BytesIO(), format='png')\n"
        "import pathlib, tempfile, pandas as pd, prereg_kit.report\n"  # the report's writers: PNG + PDF, SYNTHETIC marks
        "c = pd.DataFrame({'contrast': ['C1'], 'tier': ['primary'], 'treatment': ['t'], 'control': ['c'], 'at': ['B'],\n"
        "                  'mean': [0.01], 'ci_low': [0.0], 'ci_high': [0.02]})\n"
        "plots.forest_plot(c, pd.DataFrame({'contrast': ['C1'], 'difference': [0.01]}),\n"
        "                  pathlib.Path(tempfile.mkdtemp()) / 'f.png', title='t', synthetic=True)\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
        "assert matplotlib.rcParams._get_backend_or_none() == backend, matplotlib.rcParams._get_backend_or_none()\n"
        "changed = [k for k, v in snapshot().items() if rc.get(k) != v]\n"
        "assert not changed, changed\n"
        "print('ok')\n"
    )
    assert _fresh_python(code) == "ok"
