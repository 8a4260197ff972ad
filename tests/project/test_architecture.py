"""The layers of the project, enforced: no import cycles, imports only downward (imports inside
functions count), no module found by a name in a string. See docs/architecture.md."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import pytest
from architecture import Module, check, cycles, long_modules, missing_from_doc, scan
from paths import ROOT

# Which top-level packages each may use. ``analyses`` is numerics only (numpy/scipy) and uses none
# of ours; the core names neither the trainer nor the figures; figures read run logs through the
# core's analysis, never through the trainer.
PACKAGES = {
    "analyses": (),
    "prereg_kit": ("analyses",),
    "figures": ("prereg_kit", "analyses"),
    "trainer": ("prereg_kit", "analyses"),
    # bring your own trainer: the TRL callback evaluates with the trainer's evaluator, the
    # importers re-score outputs with its verifiers; nothing below imports them
    "prereg_kit.integrations": ("prereg_kit", "analyses", "trainer"),
}

# Layers of each package, lowest first: a module may import its own layer's modules (no cycles)
# and lower layers only.
LAYERS = {
    "prereg_kit": [
        ("foundation", ["prereg_kit.__init__", "prereg_kit.errors",
                        "prereg_kit.chain.__init__", "prereg_kit.chain.gitinfo", "prereg_kit.stages.__init__", "prereg_kit.margin", "prereg_kit.progress", "prereg_kit.stats",
                        "prereg_kit.callables"]),
        ("plan", ["prereg_kit.plan"]),
        ("records", ["prereg_kit.chain.entry", "prereg_kit.chain.chainfile", "prereg_kit.chain.sources", "prereg_kit.chain.integrity", "prereg_kit.chain.lock", "prereg_kit.chain.anchors", "prereg_kit.runlog", "prereg_kit.chain.timestamp", "prereg_kit.chain.seal", "prereg_kit.chain.gradient_seal",
                     "prereg_kit.chain.look_chain", "prereg_kit.study.__init__", "prereg_kit.study.audit", "prereg_kit.study.design", "prereg_kit.study.jobs", "prereg_kit.study.verify"]),
        ("analysis", ["prereg_kit.analysis", "prereg_kit.readings",
                      "prereg_kit.simulate.__init__", "prereg_kit.simulate.gradient", "prereg_kit.simulate.synth"]),
        ("output", ["prereg_kit.report", "prereg_kit.simulate.dryrun", "prereg_kit.registry",
                    "prereg_kit.stages.calibration", "prereg_kit.stages.probe", "prereg_kit.study.status", "prereg_kit.study.export"]),
        ("api", ["prereg_kit.api"]),  # `import prereg_kit as pk`: __init__ exports it lazily (PEP 562)
        ("command", ["prereg_kit.cli",
                     "prereg_kit.__main__"]),
    ],
    "analyses": [("analyses", ["analyses"])],
    "prereg_kit.integrations": [
        ("core", ["prereg_kit.integrations.__init__", "prereg_kit.integrations.tracker_presets", "prereg_kit.integrations.jsonlines",
                  "prereg_kit.integrations.rescore", "prereg_kit.integrations.importing"]),
        ("readers", ["prereg_kit.integrations.trackers", "prereg_kit.integrations.trl_outputs", "prereg_kit.integrations.tracker_evals",
                     "prereg_kit.integrations.tracker_run", "prereg_kit.integrations.verl",
                     "prereg_kit.integrations.openrlhf", "prereg_kit.integrations.trl_state",
                     "prereg_kit.integrations.tensorboard", "prereg_kit.integrations.mlflow",
                     "prereg_kit.integrations.wandb", "prereg_kit.integrations.tracker_records",
                     "prereg_kit.integrations.wandb_log"]),
        ("trl", ["prereg_kit.integrations.trl_rewards", "prereg_kit.integrations.trl_deferred", "prereg_kit.integrations.trl_args",
                 "prereg_kit.integrations.trl"]),
        ("commands", ["prereg_kit.integrations.command", "prereg_kit.integrations.tracker_commands",
                      "prereg_kit.integrations.evaluations_file",
                      "prereg_kit.integrations.trl_command"]),
    ],
    "figures": [
        ("helpers", ["figures.__init__", "figures.cpu_studies", "figures.paper_tables"]),
        ("builders", ["figures.build_*"]),
        ("command", ["figures.__main__"]),
    ],
    "trainer": [
        ("errors", ["trainer.__init__", "trainer.errors", "trainer.keys"]),
        ("data", ["trainer.data"]),
        ("rewards", ["trainer.rewards"]),
        ("sections", ["trainer.sections"]),
        ("settings", ["trainer.config"]),
        ("core", ["trainer.core"]),
        ("interventions", ["trainer.interventions"]),
        ("run", ["trainer.loop", "trainer.probe_grad"]),
        ("commands", ["trainer.progress_lines", "trainer.run_worker", "trainer.launch", "trainer.elect", "trainer.smoke", "trainer.plugin", "trainer.__main__",
                      "trainer.gradient_test", "trainer.executors"]),
    ],
}
COMMANDS = ("prereg_kit.integrations.command", "prereg_kit.integrations.tracker_commands", "prereg_kit.integrations.evaluations_file",
            "prereg_kit.integrations.trl_command", "prereg_kit.cli", "prereg_kit.cli.commands", "prereg_kit.cli.run", "prereg_kit.cli.status", "prereg_kit.cli.export", "prereg_kit.cli.registry", "prereg_kit.__main__", "trainer.__main__", "trainer.smoke", "figures.__main__", "trainer.plugin")

# Deferred imports outside command modules that keep the start-up of `prereg lock` and `prereg
# verify` light, (importer, imported) each: the recipe check of every plan reaches the trainer's
# reward spec, and the channel table behind it (the verifiers, the problem formats, the program
# sandbox) is needed only by a recipe that names channels. Each pair is one edge, not a licence for
# the module: any other deferred import there still fails.
LIGHT_START = (("trainer.rewards.spec", "trainer.rewards.channels"),)


@functools.cache
def _scanned(root: Path, packages: tuple[str, ...]) -> Mapping[str, Module]:
    """The project's modules parsed once per test process (the checks below only read them)."""
    return MappingProxyType(scan(root, list(packages)))


def _check(root: Path, packages=PACKAGES, layers=LAYERS, commands=COMMANDS, light=LIGHT_START) -> list[str]:
    return check(_scanned(root, tuple(p for p in packages if (root / p.split(".")[0]).is_dir())), packages=packages,
                 layers=layers, commands=commands, light=light)


def test_the_project_has_no_cycles_and_imports_only_downward():
    problems = _check(ROOT)
    assert problems == [], "\n".join(problems)


MAX_LINES = 520  # "about 500"; a longer module says why in its docstring (a sentence with "lines")


def test_modules_are_about_500_lines_or_say_why():
    long = long_modules(_scanned(ROOT, tuple(PACKAGES)), MAX_LINES)
    assert long == [], long


def test_a_long_module_passes_only_when_its_docstring_says_why(tmp_path):
    body = "x = 1\n" * 30
    _package(tmp_path, {"app/__init__.py": "", "app/silent.py": '"""Does things."""\n' + body,
                        "app/said.py": '"""One table of 30 lines: splitting it would hide the pattern."""\n' + body})
    assert long_modules(scan(tmp_path, ["app"]), 20) == ["app.silent: 31 lines"]


def test_every_module_is_in_a_layer():
    mods = _scanned(ROOT, tuple(PACKAGES))
    assert len(mods) > 60  # the scan found the project
    assert not [p for p in _check(ROOT) if "in no layer" in p]


# --- the check itself, on small packages built in a temporary folder -----------------------------

def _package(tmp: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp


def _tiny(tmp: Path, files: dict[str, str], layers=None) -> list[str]:
    base = {"app/__init__.py": "", "app/low.py": "X = 1\n", "app/high.py": "from app.low import X\n"}
    root = _package(tmp, base | files)
    layers = layers or {"app": [("low", ["app.__init__", "app.low"]), ("high", ["app.high", "app.top"])]}
    return check(scan(root, ["app"]), packages={"app": ()}, layers=layers)


def test_a_clean_package_passes(tmp_path):
    assert _tiny(tmp_path, {}) == []


def test_a_cycle_made_inside_a_function_fails(tmp_path):
    """The circle the trainer once had: a deferred import pointing back up closes a loop."""
    problems = _tiny(tmp_path, {"app/low.py": "X = 1\ndef f():\n    from app.high import X\n    return X\n"})
    assert any(p == "cycle: app.high -> app.low" for p in problems), problems
    assert any("app.low:3: imports app.high: upward, from layer 'low' to 'high'" in p for p in problems)


def test_a_three_module_cycle_at_module_level_fails(tmp_path):
    files = {"app/a.py": "from app import b\n", "app/b.py": "from . import c\n", "app/c.py": "import app.a\n"}
    problems = _tiny(tmp_path, files, layers={"app": [("all", ["app"])]})
    assert problems == ["cycle: app.a -> app.b -> app.c"], problems


def test_relative_imports_are_resolved(tmp_path):
    files = {"app/sub/__init__.py": "", "app/sub/x.py": "from ..high import X\n"}
    layers = {"app": [("low", ["app.__init__", "app.low", "app.sub"]), ("high", ["app.high"])]}
    problems = _tiny(tmp_path, files, layers=layers)
    assert problems == ["app.sub.x:1: imports app.high: upward, from layer 'low' to 'high'"], problems


def test_an_upward_import_without_a_cycle_fails(tmp_path):
    problems = _tiny(tmp_path, {"app/mid.py": "import app.high\n"},
                     layers={"app": [("low", ["app.__init__", "app.low", "app.mid"]), ("high", ["app.high"])]})
    assert problems == ["app.mid:1: imports app.high: upward, from layer 'low' to 'high'"], problems


def test_a_module_outside_every_layer_fails(tmp_path):
    problems = _tiny(tmp_path, {"app/stray.py": ""})
    assert problems == ["app.stray: in no layer of app (add it to the layer table)"], problems


def test_a_deferred_import_is_allowed_only_to_keep_torch_out(tmp_path):
    files = {"app/gpu.py": "import torch\n",
             "app/top.py": "def f():\n    from app import gpu\n    from app.high import X\n"}
    layers = {"app": [("low", ["app.__init__", "app.low", "app.gpu"]), ("high", ["app.high", "app.top"])]}
    problems = _tiny(tmp_path, files, layers=layers)
    assert problems == ["app.top:3: imports app.high inside a function; allowed only to keep torch out of "
                        "torch-free code or in a command module"], problems


def test_a_deferred_import_for_a_light_start_is_allowed_only_for_the_listed_pair(tmp_path):
    """A pair in the light-start list passes; the same module deferring another import, or another
    module deferring the listed one, still fails."""
    files = {"app/top.py": "def f():\n    from app.low import X\n",
             "app/side.py": "def f():\n    from app.low import X\n"}
    layers = {"app": [("low", ["app.__init__", "app.low"]), ("high", ["app.high", "app.top", "app.side"])]}
    root = _package(tmp_path, {"app/__init__.py": "", "app/low.py": "X = 1\n", "app/high.py": "Y = 1\n"} | files)
    problems = check(scan(root, ["app"]), packages={"app": ()}, layers=layers, light=[("app.top", "app.low")])
    assert problems == ["app.side:2: imports app.low inside a function; allowed only to keep torch out of "
                        "torch-free code or in a command module"], problems
    (root / "app/top.py").write_text("def f():\n    from app.low import X\n    from app.high import Y\n")
    problems = check(scan(root, ["app"]), packages={"app": ()}, layers=layers, light=[("app.top", "app.low")])
    assert "app.top:3: imports app.high inside a function; allowed only to keep torch out of torch-free code or in a " \
           "command module" in problems and not any(p.startswith("app.top:2") for p in problems), problems


def test_the_project_needs_its_light_start_pairs():
    """Without the list the project's check fails on exactly those pairs: the list holds no stale entry."""
    problems = _check(ROOT, light=())
    assert sorted(p.split(":")[0] + " -> " + p.split("imports ")[1].split()[0] for p in problems) == \
        sorted(f"{a} -> {b}" for a, b in LIGHT_START), problems


def test_imports_for_type_checking_only_do_not_count(tmp_path):
    files = {"app/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n    from app.high import X\n"}
    assert _tiny(tmp_path, files) == []


def test_a_package_exports_lazily_only_from_its_own_getattr(tmp_path):
    """A package's __init__ may name modules above it inside its module-level __getattr__ (read
    only when a user asks the package for that name); nowhere else, and never another package."""
    lazy = "def __getattr__(name):\n    from app import high\n    return high\n"
    assert _tiny(tmp_path, {"app/__init__.py": lazy}) == []
    problems = _tiny(tmp_path, {"app/__init__.py": "", "app/low.py": "X = 1\n" + lazy})
    assert any(p.startswith("app.low:3: imports app.high: upward") for p in problems), problems
    assert any("app.low:3: imports app.high inside a function" in p for p in problems), problems
    nested = "def f():\n    def __getattr__(name):\n        from app import high\n"
    assert any("upward" in p for p in _tiny(tmp_path, {"app/__init__.py": nested})), "only the module's own __getattr__"
    other = {"app/__init__.py": "def __getattr__(name):\n    import plugin\n", "plugin/__init__.py": ""}
    _package(tmp_path, other)
    problems = check(scan(tmp_path, ["app", "plugin"]), packages={"app": (), "plugin": ()},
                     layers={"app": [("low", ["app.__init__", "app.low"]), ("high", ["app.high"])]})
    assert "app:2: imports plugin: app may not use plugin" in problems, problems


def test_a_module_named_in_a_string_fails(tmp_path):
    files = {"app/top.py": "import importlib\nRULE = importlib.import_module('app.low')\n"}
    problems = _tiny(tmp_path, files)
    assert problems == ["app.top:2: names module 'app.low' in a string; import it instead"], problems


def test_a_package_may_not_use_one_above_it(tmp_path):
    _package(tmp_path, {"core/__init__.py": "", "core/x.py": "import plugin.y\n",
                        "plugin/__init__.py": "", "plugin/y.py": "import core.x\n"})
    mods = scan(tmp_path, ["core", "plugin"])
    problems = check(mods, packages={"core": (), "plugin": ("core",)}, layers={})
    assert "core.x:1: imports plugin.y: core may not use plugin" in problems
    assert "cycle: core.x -> plugin.y" in problems


@pytest.mark.parametrize("n", [2, 50, 2000])
def test_long_cycles_are_found_without_recursion(tmp_path, n):
    files = {"app/__init__.py": ""} | {f"app/m{i}.py": f"import app.m{(i + 1) % n}\n" for i in range(n)}
    _package(tmp_path, files)
    found = cycles(scan(tmp_path, ["app"]))
    assert len(found) == 1 and len(found[0]) == n


def test_a_sub_package_with_its_own_key_may_sit_above_another_package(tmp_path):
    """The integrations live in prereg_kit but above the trainer: they may import it, the rest of
    the package may not import them."""
    files = {"app/__init__.py": "", "app/low.py": "X = 1\n", "app/plug/__init__.py": "",
             "app/plug/x.py": "import other.y\nfrom app.low import X\n",
             "other/__init__.py": "", "other/y.py": "import app.low\n"}
    root = _package(tmp_path, files)
    packages = {"app": (), "other": ("app",), "app.plug": ("app", "other")}
    layers = {"app": [("all", ["app"])], "other": [("all", ["other"])], "app.plug": [("all", ["app.plug"])]}
    assert check(scan(root, list(packages)), packages=packages, layers=layers) == []
    (root / "app/low.py").write_text("X = 1\nimport app.plug.x\n")
    problems = check(scan(root, list(packages)), packages=packages, layers=layers)
    assert "app.low:2: imports app.plug.x: app may not use app.plug" in problems, problems


def test_every_core_module_is_named_in_the_architecture_doc():
    missing = missing_from_doc(ROOT, "prereg_kit", (ROOT / "docs" / "architecture.md").read_text())
    assert missing == [], f"name these in docs/architecture.md: {missing}"


def test_the_doc_check_fails_on_a_module_missing(tmp_path):
    _package(tmp_path, {"app/__init__.py": "", "app/a.py": "", "app/sub/__init__.py": "", "app/sub/b.py": ""})
    assert missing_from_doc(tmp_path, "app", "`__init__`, `a`, `sub/` (`b`)") == []
    assert missing_from_doc(tmp_path, "app", "`__init__`, `sub/` (`b`)") == ["a.py"]
    assert missing_from_doc(tmp_path, "app", "`__init__`, `a`, `b`") == ["sub/__init__.py", "sub/b.py"]
    assert missing_from_doc(tmp_path, "app", "`a`, `sub/`\n```\n`b`\n```") == ["__init__.py", "sub/b.py"]
