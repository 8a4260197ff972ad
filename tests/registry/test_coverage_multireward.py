"""registry/coverage/multi-reward.toml: every table and figure of the multi-reward paper that prints a
comparison, with the registry studies, plan contrasts and rechecked rows that hold it. Stands alone:
checks every name against the registry itself (`prereg registry --coverage` validates it too)."""

from __future__ import annotations

import copy
import functools
import tomllib

import pytest
from paths import ROOT

from prereg_kit.plan import load_plan
from prereg_kit.registry import load_reported, recheck_study

REGISTRY = ROOT / "registry"
FILE = REGISTRY / "coverage" / "multi-reward.toml"
ITEM_KEYS = {"id", "title", "plans", "contrasts", "recheck", "reason"}


@functools.cache
def _contrasts(study: str) -> frozenset[str]:
    return frozenset(x.id for x in load_plan(REGISTRY / study).plan.contrasts)


@functools.cache
def _reported_ids(study: str) -> frozenset[str]:
    rep = load_reported(REGISTRY / study)
    return frozenset({x.id for x in rep.rows} | {e.id for e in rep.endpoints})


@pytest.fixture(scope="module")
def doc() -> dict:
    return tomllib.loads(FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def statuses() -> dict[str, dict[str, str]]:
    """Per multi-reward study: recheck status by row or endpoint id."""
    return {d.name: {r.row: r.status for r in recheck_study(d)}
            for d in sorted(REGISTRY.glob("mr-*")) if (d / "reported.toml").exists()}


def problems(doc: dict, statuses: dict[str, dict[str, str]]) -> list[str]:
    """Every name in the coverage document that the registry does not hold, and every item that is
    neither covered (a plan, a contrast and a row recheck checks) nor given the paper's reason."""
    out = []
    if doc.get("paper") != "multi-reward":
        out.append(f"paper = {doc.get('paper')!r}, not the short name multi-reward")
    if set(doc) - {"paper", "item"}:
        out.append(f"unknown keys {sorted(set(doc) - {'paper', 'item'})}")
    ids = [i.get("id") for i in doc.get("item", [])]
    out += [f"item {i!r} listed twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for item in doc.get("item", []):
        where = f"item {item.get('id')!r}"
        if set(item) - ITEM_KEYS or not {"id", "title"} <= set(item):
            out.append(f"{where}: keys {sorted(item)}")
            continue
        for s in item.get("plans", []):
            if not (REGISTRY / s / "plan.toml").is_file():
                out.append(f"{where}: no study {s!r}")
        for ref in item.get("contrasts", []):
            s, _, c = ref.partition(":")
            if not (REGISTRY / s / "plan.toml").is_file():
                out.append(f"{where}: {ref}: no study {s!r}")
            elif c not in _contrasts(s):
                out.append(f"{where}: {ref}: no contrast {c!r}")
        checked = []
        for ref in item.get("recheck", []):
            s, _, r = ref.partition(":")
            if s not in statuses or r not in statuses[s]:
                out.append(f"{where}: {ref}: no reported row {r!r} in {s!r}")
                continue
            assert r in _reported_ids(s)
            if statuses[s][r] == "inconsistent":
                out.append(f"{where}: {ref}: recheck finds it inconsistent")
            if statuses[s][r] != "not checkable":
                checked.append(ref)
        covered = item.get("plans") and item.get("contrasts") and checked
        if not covered and not item.get("reason"):
            out.append(f"{where}: neither covered nor given a reason")
    return out


def test_every_name_exists_and_every_item_is_covered_or_explained(doc, statuses):
    assert problems(doc, statuses) == []
    ids = [i["id"] for i in doc["item"]]
    for must in ("Table 1", "Table 2", "Table 7", "Table 8", "Table 11", "Table B.2", "Table C.2", "Table C.3", "Figure 10"):
        assert must in ids
    # every new multi-reward study is listed under some item
    listed = {s for i in doc["item"] for s in i["plans"]}
    assert {"mr-llama-negative", "mr-q30b", "mr-lambda-sweep"} <= listed


@pytest.mark.parametrize("attack, expect", [
    (lambda d: d["item"][0]["plans"].append("mr-nowhere"), "no study 'mr-nowhere'"),
    (lambda d: d["item"][0]["contrasts"].append("mr-correct-brief:X-none"), "no contrast 'X-none'"),
    (lambda d: d["item"][0]["recheck"].append("mr-q30b:no-row"), "no reported row 'no-row'"),
    (lambda d: d["item"][0]["recheck"].append("mr-nowhere:symmetric-pass4"), "no reported row"),
    (lambda d: d["item"].append(dict(d["item"][0])), "listed twice"),
    (lambda d: d.update(paper="multi-reward paper"), "not the short name"),
    (lambda d: d["item"][0].update(plan=["mr-q30b"]), "keys"),
    # an item whose only rows recheck cannot check is not covered without a reason
    (lambda d: d["item"][0].update(recheck=["mr-code-fast:symmetric"]), "neither covered nor given a reason"),
])
def test_the_check_catches_a_bad_name(doc, statuses, attack, expect):
    bad = copy.deepcopy(doc)
    attack(bad)
    assert any(expect in p for p in problems(bad, statuses))
