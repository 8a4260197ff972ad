"""The looks of a sequential plan in the lock chain (entries of kind ``look``).

Each look analyzed by ``prereg analyze`` is appended as an entry: its number, the seeds it used,
the plan entry it read the plan from, every looked-at contrast's p, boundary and decision, and the
study's decision (``stop: efficacy``, ``stop: futility``, ``continue to look k+1`` or ``final``).
The rules, checked when a look is recorded (refused) and whenever the chain is audited (violations):

- look k needs an entry for look k − 1 before it, so a later look cannot pretend to be the first;
- a look is recorded once; analyzing it again must give the same seeds and result (nothing is
  appended), and a look cannot be recorded after a later look;
- a look comes after the seals of every run it read (a look dated before its data is back-dated);
- the plan it read is the chain's last plan entry, and no amendment after the first look may change
  ``sequential`` (the lock fixes the looks);
- runs of seeds beyond a look whose decision was to stop: a run started after the stop was
  recorded is a violation (optional continuation); one started before it is an overrun, a warning.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from ..errors import ViolationError
from .lock import Chain, append_entries, parse_time

LOOK = "look"
STOP = "stop"
FINAL = "final"


def look_entries(chain: Chain) -> list[dict[str, Any]]:
    return [e for e in chain.entries if e["kind"] == LOOK]


def _result(e: dict[str, Any]) -> tuple:
    """What two records of the same look must agree on."""
    return (e.get("look"), tuple(e.get("seeds", [])), e.get("decision"), e.get("plan_hash"),
            tuple(sorted((c.get("contrast"), c.get("decision"), c.get("p")) for c in e.get("contrasts", []))))


def look_chain_problems(chain: Chain) -> list[str]:
    """Violations of the module's rules in ``chain`` (one line each, naming the entry)."""
    out: list[str] = []
    lp = chain.path
    seen: dict[int, dict[str, Any]] = {}
    sealed: set[tuple[str, int]] = set()
    last_plan: dict[str, Any] | None = None
    first_look: int | None = None
    for e in chain.entries:
        kind = e["kind"]
        if kind == "seal":
            sealed.add((e.get("configuration"), e.get("seed")))
        elif kind in ("lock", "amendment"):
            if first_look is not None and kind == "amendment":
                keys = [c["key"] for c in e.get("changes", []) if str(c.get("key", "")).split(".")[0].split("[")[0] == "sequential"]
                if keys:
                    out.append(f"{lp}: entry {e['index']}: amendment changes {', '.join(keys[:4])} after look entry "
                               f"{first_look}: the lock fixes the looks")
            last_plan = e
        if kind != LOOK:
            continue
        k, i = e.get("look"), e["index"]
        if not isinstance(k, int) or k < 1:
            out.append(f"{lp}: entry {i}: a look entry without a look number")
            continue
        first_look = i if first_look is None else first_look
        if k in seen:
            if _result(seen[k]) != _result(e):
                out.append(f"{lp}: entry {i}: look {k} recorded again with other seeds or another result "
                           f"(entry {seen[k]['index']}): a look is analyzed once")
            continue
        later = [j for j in seen if j > k]
        if later:
            out.append(f"{lp}: entry {i}: look {k} recorded after look {max(later)}: a later look cannot pretend to be the first")
        elif k > 1 and k - 1 not in seen:
            out.append(f"{lp}: entry {i}: look {k} recorded with no entry for look {k - 1} before it")
        missing = [f"{c}/seed-{s}" for c in e.get("configurations", []) for s in e.get("seeds", []) if (c, s) not in sealed]
        if missing:
            out.append(f"{lp}: entry {i}: look {k} read runs not sealed before it ({', '.join(missing[:4])}"
                       f"{' …' if len(missing) > 4 else ''}): a look comes after its data (back-dated?)")
        if last_plan is None or e.get("plan_entry") != last_plan["index"] or e.get("plan_hash") != last_plan["content_sha256"]:
            out.append(f"{lp}: entry {i}: look {k} names plan entry {e.get('plan_entry')}, not the last plan entry "
                       f"before it ({last_plan['index'] if last_plan else None})")
        seen[k] = e
    return out


def stopped_run_findings(chain: Chain, runs: Iterable[tuple[str, int, datetime]]) -> tuple[list[str], list[str]]:
    """Main runs ``(configuration, seed, started_at)`` of seeds beyond a look whose recorded
    decision was to stop: (violations: started after the stop; warnings: overruns started before)."""
    stops = [e for e in look_entries(chain) if str(e.get("decision", "")).startswith(STOP)]
    if not stops:
        return [], []
    stop = stops[0]
    when, allowed = parse_time(stop["time"]), set(stop.get("seeds", []))
    bad, overrun = [], []
    for conf, seed, started in sorted(runs, key=lambda r: (r[1], r[0])):
        if seed in allowed:
            continue
        what = (f"{conf}/seed-{seed}: seed {seed} is beyond look {stop['look']} (seeds "
                f"{', '.join(map(str, stop.get('seeds', [])))}), whose decision was {stop['decision']!r} (entry {stop['index']})")
        if started >= when:
            bad.append(f"{what}; the run started after it: optional continuation")
        else:
            overrun.append(f"{what}; the run started before the stop was recorded (an overrun; it is not analyzed)")
    return bad, overrun


def record_look(plan_path: str | Path, fields: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Append the look ``fields`` (kind, look, seeds, decision, contrasts, plan_entry, plan_hash,
    configurations) under the chain's lock, refusing what :func:`look_chain_problems` forbids.
    Returns ``("recorded", entry)`` or ``("unchanged", earlier entry)`` for a look analyzed again."""
    found: dict[str, Any] = {}

    def make(chain: Chain) -> list[dict[str, Any]]:
        k = fields["look"]
        prior = {e["look"]: e for e in look_entries(chain)}
        if k in prior:
            if _result(prior[k]) == _result({**fields, "kind": LOOK}):
                found["entry"] = prior[k]
                return []
            raise ViolationError(f"{chain.path}: look {k} is already recorded (entry {prior[k]['index']}) with other "
                                 "seeds or another result: a look is analyzed once")
        if later := [j for j in prior if j > k]:
            raise ViolationError(f"{chain.path}: look {max(later)} is already recorded; look {k} cannot be analyzed after it")
        if k > 1 and k - 1 not in prior:
            raise ViolationError(f"{chain.path}: look {k - 1} has no entry in the lock chain; analyze it first "
                                 f"(`prereg analyze STUDY --look {k - 1}`): a later look cannot pretend to be the first")
        return [{**fields, "kind": LOOK}]

    new = append_entries(plan_path, make, what=f"recording look {fields['look']}")
    return ("recorded", new[0]) if new else ("unchanged", found["entry"])


__all__ = ["LOOK", "look_chain_problems", "look_entries", "record_look", "stopped_run_findings"]
