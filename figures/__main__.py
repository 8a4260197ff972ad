"""Run every figure builder into ``figures/out/`` and write ``figures/out/INDEX.md``.

A builder is a module ``figures/build_*.py`` with ``OUTPUT`` (file name), ``DESCRIPTION``,
``INPUTS`` and ``build(out_dir) -> Path``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import figures
from prereg_kit.progress import shown_path


def main(out_dir: Path = Path(__file__).parent / "out") -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    names = sorted(m.name for m in pkgutil.iter_modules(figures.__path__) if m.name.startswith("build_"))
    for name in names:
        mod = importlib.import_module(f"figures.{name}")
        path = mod.build(out_dir)
        print(f"built {shown_path(path)}")  # as the user would type it, from where make runs
        rows.append(f"| `{Path(path).name}` | {mod.DESCRIPTION} | {mod.INPUTS} |")
    index = ["# figures/out", "", "| output | what it shows | inputs |", "|---|---|---|", *rows]
    if not rows:
        index.append("| (none yet) | builders land with the registry issue | |")
    (out_dir / "INDEX.md").write_text("\n".join(index) + "\n")
    print(f"{len(rows)} builder(s); index at {shown_path(out_dir / 'INDEX.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
