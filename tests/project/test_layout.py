"""Where tests live (docs/testing.md, "Where tests live"): each test file in the folder of the
package it tests, so that a change finds its tests. The folders are the sub-packages of
``prereg_kit`` (``tests/chain/`` for ``prereg_kit.chain``), the other top-level packages
(``tests/trainer/``, ``tests/analyses/``, ``tests/figures/``) and ``tests/project/`` for the whole
project. Each rule is tried with a tree built to break it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import ROOT, TESTS

DOC = ROOT / "docs" / "testing.md"
PROJECT = "project"
# the repository's root or tests/ computed from a test file's own depth (paths.py gives them)
FROM_DEPTH = re.compile(r"Path\(__file__\)[\w().]*\.(parents\[|parent\.parent)")
HERE = "Path(__file__)"  # spelt apart below, so that this file does not match FROM_DEPTH itself


def package_folders(root: Path) -> set[str]:
    """The folders a test file may sit in: one per sub-package of prereg_kit, one per other
    top-level package of the repository, and the project's."""
    core = {p.name for p in (root / "prereg_kit").iterdir() if (p / "__init__.py").is_file()}
    top = {p.name for p in root.iterdir() if (p / "__init__.py").is_file() and p.name != "prereg_kit"}
    return core | top | {PROJECT}


def layout_problems(root: Path, tests: Path) -> list[str]:
    """One line per test file out of place (in tests/ itself, deeper than one folder, in a folder
    no package has), per name two test files share, per test file that computes the root from its
    depth, and per __init__.py under tests/ (pytest would import its folder as a package named like
    the one it tests)."""
    folders = package_folders(root)
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if len(rel.parts) != 2:
            problems.append(f"tests/{rel.as_posix()}: not in a package's folder (tests/<package>/{path.name})")
        elif rel.parts[0] not in folders:
            problems.append(f"tests/{rel.as_posix()}: no package {rel.parts[0]!r} (prereg_kit.{rel.parts[0]} "
                            f"or a top-level package)")
        if path.name in seen:
            problems.append(f"tests/{rel.as_posix()}: the name of tests/{seen[path.name].as_posix()}")
        seen.setdefault(path.name, rel)
        if FROM_DEPTH.search(path.read_text(encoding="utf-8")):
            problems.append(f"tests/{rel.as_posix()}: computes a path from its own depth (use paths.ROOT / TESTS / DATA)")
    problems += [f"tests/{p.relative_to(tests).as_posix()}: no package under tests/"
                 for p in sorted(tests.rglob("__init__.py"))]
    return problems


def doc_folders(text: str) -> list[str]:
    """The folders the doc's "Where tests live" table names."""
    section = text.split("## Where tests live", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `tests/(\w+)/` \|", section, re.M)


def test_every_test_file_is_in_the_folder_of_a_package():
    assert layout_problems(ROOT, TESTS) == []


def test_the_doc_table_names_every_test_folder():
    have = sorted({p.parent.name for p in TESTS.glob("*/test_*.py")})
    assert sorted(doc_folders(DOC.read_text(encoding="utf-8"))) == have
    assert set(have) <= package_folders(ROOT)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A repository with prereg_kit.chain and trainer, and one test file in each one's folder."""
    for pkg in ("prereg_kit", "prereg_kit/chain", "trainer"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "prereg_kit" / "templates").mkdir()  # a data folder: no package
    for folder in ("chain", "trainer", "project"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / f"test_{folder}.py").write_text("from paths import ROOT\n")
    (tmp_path / "tests" / "plans.py").write_text("")  # a helper in tests/ itself
    return tmp_path


def test_a_clean_tree_passes(tree):
    assert layout_problems(tree, tree / "tests") == []


MISPLACED = [  # (the file written, its text, the problem it must be found as)
    ("test_flat.py", "", "/test_flat.py: not in a package's folder"),  # (the message names tests/ first)
    ("chain/deep/test_deep.py", "", "tests/chain/deep/test_deep.py: not in a package's folder"),
    ("seal/test_seal.py", "", "tests/seal/test_seal.py: no package 'seal'"),
    ("templates/test_templates.py", "", "tests/templates/test_templates.py: no package 'templates'"),
    ("project/test_chain.py", "", "tests/project/test_chain.py: the name of tests/chain/test_chain.py"),
    ("trainer/test_root.py", f"ROOT = {HERE}.resolve().parents[2]\n",
     "tests/trainer/test_root.py: computes a path from its own depth"),
    ("trainer/test_up.py", f"DATA = {HERE}.parent.parent / 'data'\n",
     "tests/trainer/test_up.py: computes a path from its own depth"),
    ("chain/__init__.py", "", "tests/chain/__init__.py: no package under tests/"),
]


@pytest.mark.parametrize(("path", "text", "problem"), MISPLACED, ids=[case[0] for case in MISPLACED])
def test_a_misplaced_file_fails(tree, path, text, problem):
    (tree / "tests" / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / "tests" / path).write_text(text)
    problems = layout_problems(tree, tree / "tests")
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_doc_table_is_read_from_its_section():
    text = ("## Where tests live\n\n| folder | tests |\n|---|---|\n| `tests/chain/` | the chain |\n"
            "| `tests/cli/` | the commands |\n\n## Running a part\n\n| `tests/other/` | not this section |\n")
    assert doc_folders(text) == ["chain", "cli"]
