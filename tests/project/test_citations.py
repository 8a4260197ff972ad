"""Citations are self-contained: code, docs, tests and the registry's study files cite the papers by
name and section, table, figure or equation (docs/papers.md), never by files a user does not have (a
reading aid, the papers' plain-text copies) or by line numbers of such a copy.

What is checked in ``registry/`` as everywhere else, with only these left as they are, each because
the text is data that must stay byte for byte:

- the row ids of ``reported.toml`` (``L3115-td``, ``L3530-pooled``) and the ``<study folder>:<row id>``
  references to them (``registry/coverage/*.toml``): ids are keys that tests, the coverage files and
  earlier reports look rows up by, and must not change; a test that quotes one is looking a row up,
  not citing a line;
- ``plan.lock``: each chain entry holds the plan's parsed content as it was locked or amended, and
  its hash covers that content, so an old entry keeps the citations the plan then had (a later
  amendment's entry holds the rewritten ones);
- the two strings of ``registry/cpu-gradient`` (``CPU_GRADIENT_LOCKED``): they are locked content of a
  study whose runs and gradient results are sealed under that entry (the plan's ``study.source``,
  gradient test G2's description, and G2's sealed ``meta.json``, which copies it); rewriting them
  is an amendment after the runs, which would put every sealed run under a superseded entry, and
  editing ``meta.json`` would break its seal. The test below keeps the exemption only while the
  last lock entry still holds these strings;
- base64 payloads of images embedded in the reports (``report.html``), which are not text.

A row's ``line`` field is an integer ordering key (the figure and table builders print rows in the
paper's order), not a citation; ``docs/registry.md`` says so."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from paths import ROOT

# history may quote what an entry removed
SKIP = {"tests/project/test_citations.py", "CHANGELOG.md"}
CHAIN = "plan.lock"  # hashed chain entries: an old entry keeps the plan text it locked
CPU_GRADIENT_LOCKED = {  # locked, with sealed runs and gradient results under that entry (docstring)
    "registry/cpu-gradient/plan.toml": ("(L742-750, L3026-3042)", "(H.3, L6262-6275)"),
    "registry/cpu-gradient/gradient/G2/meta.json": ("(H.3, L6262-6275)",),
}
BASE64 = re.compile(r"base64,[A-Za-z0-9+/=]+")
FORBIDDEN = re.compile(
    r"extract(?:\.md)?\s*(?:§|S\d|L\d)"  # the reading aid's sections
    r"|extract\.md"
    r"|seeds/"  # the folder of the papers' plain-text copies
    r"|\bP2:L\d"  # a line of the multi-reward paper's copy
    r"|\bL\d{3,5}\b"  # a line of the dense-rewards paper's copy
)
QUOTED = re.compile(r'"([^"\n]*)"|`([^`\n]*)`')  # a row id in quotes or backticks


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p and p not in SKIP and Path(p).name != CHAIN]


def _registry_keys() -> set[str]:
    """The registry's row ids, also as ``<study folder>:<row id>``: data a row is looked up by."""
    keys: set[str] = set()
    for f in ROOT.glob("registry/*/reported.toml"):
        data = tomllib.loads(f.read_text())
        for table in ("rows", "endpoints", "amendments"):
            for row in data.get(table, []):
                if "id" in row:
                    keys |= {str(row["id"]), f"{f.parent.name}:{row['id']}"}
    return keys


def _masked(rel: str, text: str) -> str:
    """The text with what is data, not citation, taken out: embedded images, the locked strings."""
    text = BASE64.sub("base64,", text)
    for fragment in CPU_GRADIENT_LOCKED.get(rel, ()):
        text = text.replace(fragment, "")
    return text


def _hits(text: str, keys: set[str]) -> list[tuple[int, str]]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if not FORBIDDEN.search(line):
            continue
        masked = QUOTED.sub(lambda m: '""' if (m.group(1) or m.group(2)) in keys else m.group(0), line)
        if FORBIDDEN.search(masked):
            found.append((n, line.strip()))
    return found


def test_no_citation_points_outside_the_repository():
    keys = _registry_keys()
    bad = []
    for rel in _tracked():
        path = ROOT / rel
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if b"\0" in raw[:8192]:
            continue  # binary (model weights, images)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        bad += [f"{rel}:{n}: {line[:120]}" for n, line in _hits(_masked(rel, text), keys)]
    assert not bad, "cite the paper's section, table, figure or equation (docs/papers.md):\n" + "\n".join(bad)


def test_the_registry_is_checked_and_its_exemptions_are_still_data():
    """The registry's study files are checked like the rest; each locked string left as it is is still
    in the last entry of its study's chain (amending the plan ends the exemption)."""
    tracked = _tracked()
    assert "registry/S26/plan.toml" in tracked and "registry/mr-code-fast/plan.toml" in tracked
    assert not [p for p in tracked if Path(p).name == CHAIN]
    chain = json.loads((ROOT / "registry" / "cpu-gradient" / CHAIN).read_text())
    last = json.dumps([e["content"] for e in chain["entries"] if "content" in e][-1], ensure_ascii=False)
    for rel, fragments in CPU_GRADIENT_LOCKED.items():
        text = (ROOT / rel).read_text()
        for fragment in fragments:
            assert fragment in text and fragment in last, (rel, fragment)


def test_the_masks_hide_only_data():
    keys = {"L3115-td", "S26:L3115-td"}
    assert not _hits('recheck = ["S26:L3115-td"]', keys)
    assert _hits('recheck = ["S26:L3116-td"]', keys)
    assert not _hits(_masked("registry/x/report/report.html", '<img src="data:image/png;base64,AAL3456+/x=">'), keys)
    assert _hits(_masked("registry/x/report/report.html", "<p>(L3456)</p>"), keys)
    assert _hits(_masked("registry/S26/plan.toml", 'source = "x (L742-750, L3026-3042)"'), keys)
    assert not _hits(_masked("registry/cpu-gradient/plan.toml", 'source = "x (L742-750, L3026-3042)"'), keys)


@pytest.mark.parametrize("line, flagged", [
    ("Rule (L2458-2495): an evaluation", True),
    ("(extract §3.3, §3.4)", True),
    ("the reading aid `extract.md`", True),
    ("``seeds/000_…txt``", True),
    ("(P2:L105)", True),
    ('(dense-rewards paper §C.1 "Verifiers")', False),
    ("MATH L4–5 pool, S1–S35, 12_250_000 tokens", False),
    ('td = rows["S26", "L3115-td"]', False),  # a registry row id
    ('rows["S26", "L9999-td"]', True),  # not one
    ("row ids (`L3115-td`)", False),
    ("row ids (`L9999-td`)", True),
])
def test_the_check_flags_line_and_reading_aid_citations(line, flagged):
    assert bool(_hits(line, {"L3115-td"})) is flagged


def test_papers_md_names_existing_code_and_is_linked_from_the_readme():
    text = (ROOT / "docs" / "papers.md").read_text()
    assert "Are Dense Rewards Worth Their Tokens in GRPO?" in text
    assert "Multi-Reward Hacking: From Aggregation-Induced Drift to Trust-Anchored Defense" in text
    paths = {p for p in re.findall(r"`([\w./-]+)`", text) if "/" in p}
    assert paths, "docs/papers.md names no module"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
    assert "docs/papers.md" in (ROOT / "README.md").read_text()
