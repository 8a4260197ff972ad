"""The trainer's layers: sub-packages by concern, imports only downward, function-level ones included.

Order, bottom to top: ``errors``; ``data``; ``rewards``; ``config``; ``core``; ``interventions``;
``loop``, ``launch``, ``elect``, ``__main__``. A module may import its own layer or any below it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["trainer.errors", "trainer.data", "trainer.rewards", "trainer.config", "trainer.core",
          "trainer.interventions", "trainer.loop", "trainer.launch", "trainer.elect", "trainer.__main__"]


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted((ROOT / "trainer").rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _layer(module: str) -> int:
    hits = [i for i, pre in enumerate(LAYERS) if module == pre or module.startswith(pre + ".")]
    return hits[0] if hits else -1  # the package itself


def _imports(path: Path, mods: dict[str, Path]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in mods:
                n = n.rpartition(".")[0]
            if n:
                found.add(n)
    return found


def test_trainer_imports_only_downward_and_has_no_cycle():
    mods = _modules()
    graph = {m: _imports(p, mods) - {m} for m, p in mods.items()}
    upward = [f"{m} imports {t}" for m, ts in graph.items() for t in ts
              if _layer(m) >= 0 and _layer(t) > _layer(m)]
    assert not upward
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in graph[m]:
            assert state.get(t) != 1, "import cycle: " + " → ".join(path + [m, t])
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_no_rule_is_found_through_an_import_string():
    for p in (ROOT / "trainer").rglob("*.py"):
        assert "importlib" not in p.read_text(), p
