"""The JSON documents of the commands' ``--json`` (docs/cli.md, "--json"): one document on stdout.

Each function turns what a command computed into plain JSON values (no numpy scalars, no NaN: a
missing number is null), holding every line the command's table or text shows. The human output
and these documents are drawn from the same objects, so they cannot disagree.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout (for scripts) instead of the text; "
                                                      "errors stay one line on stderr (docs/cli.md).")]
VERDICTS = {0: "OK", 1: "VIOLATIONS", 2: "UNUSABLE INPUT"}  # prereg verify's last line, by exit code


def print_json(doc: Any) -> None:
    """Print ``doc`` as the one JSON document of stdout (UTF-8 kept, NaN refused as results.json does)."""
    print(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False), flush=True)


def plain(x: Any) -> Any:
    """``x`` as JSON values: numpy and pandas scalars unwrapped, NaN, NaT and ±inf as null."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalar
        try:
            x = x.item()
        except (TypeError, ValueError):
            return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return None if str(x) in ("NaT", "nan", "<NA>") else str(x)


def frame_records(df) -> list[dict]:
    """A table's rows as JSON objects (column → value)."""
    return [] if df is None else [plain(r) for r in df.to_dict(orient="records")]


def verify_record(rep, notes: list[str]) -> dict:
    """``prereg verify --json``: the verdict, every finding, and a summary of the chain, seals and runs."""
    chain, audit = rep.chain, rep.audit
    return {
        "plan": str(rep.plan_path),
        "ok": rep.exit_code == 0,
        "exit_code": rep.exit_code,
        "verdict": VERDICTS[rep.exit_code],
        "violations": list(rep.violations),
        "problems": list(rep.problems),
        "warnings": list(rep.warnings),
        "info": list(rep.info) + list(notes),
        "lock": None if chain is None else {
            "path": str(chain.path),
            "locked_at": chain.entries[0]["time"],
            "amendments": len(chain.plan_entries) - 1,
            "entries": [{k: e.get(k) for k in ("index", "kind", "time", "content_sha256")} for e in chain.plan_entries],
            "seals": len(chain.seals),
            "gradient_seals": len(chain.gradient_seals),
            "head": {k: chain.head.get(k) for k in ("index", "kind", "time", "hash")},
        },
        "runs": None if audit is None else audit.n_runs,
        "devices": {} if audit is None or not audit.devices else plain(dict(audit.devices.counts)),
        "sealed_runs": [] if rep.seals is None else sorted(rep.seals.sealed),
        "anchors": rep.anchors,  # head (index, kind, time, hash), shared_head (--head), git coverage
        **({"sources": [s.record() for s in rep.sources]} if rep.sources else {}),  # [[sources]] verified, as pinned
    }


def registry_record(base, states, problems: dict, backend_name: str, not_checked: str, why: bool) -> dict:
    """``prereg registry --json``: one record per study with the table's columns (and, with --why,
    the reasons per configuration the trainer cannot run), then the totals the table's caption gives."""
    studies = []
    for s in states:
        pr = problems[s.folder]
        rec = {"study": s.folder, "id": s.study_id, "title": s.title, "plan_valid": s.plan_valid,
               "plan_error": s.plan_error or None, "locked": s.locked, "runs": s.runs, "report": s.report,
               "reported_rows": s.reported_rows, "reported_error": s.reported_error or None, "endpoints": s.endpoints,
               "runnable": None if pr is None else sum(not v for v in pr.values()),
               "configurations": None if pr is None else len(pr)}
        if why:
            rec["reasons"] = None if pr is None else {name: list(lines) for name, lines in pr.items() if lines}
        studies.append(rec)
    checked = [s for s in studies if s["runnable"] is not None]
    return {"root": str(base), "studies": studies,
            "totals": {"studies": len(states), "valid_plans": sum(s.plan_valid for s in states),
                       "reported_records": sum(s.reported_rows is not None for s in states),
                       "with_errors": sum(not s.plan_valid or bool(s.reported_error) for s in states),
                       "configurations": sum(s["configurations"] for s in checked) if checked else None,
                       "runnable": sum(s["runnable"] for s in checked) if checked else None},
            "trainer": backend_name if checked else None,
            "runnable_not_checked": None if checked else not_checked}


def recheck_record(res, rows) -> dict:
    """``prereg recheck --json``: one record per printed test rechecked (``tests``), the rows as the
    table shows them (``rows``, with their check lines), the counts and the studies skipped."""
    tests, out_rows = [], []
    for r in rows:
        base = {"study": r.study, "row": r.row, "label": r.label, "source": r.source}
        out_rows.append({**base, "n": r.n, "printed": r.printed, "test": r.test, "status": r.status,
                         "mismatch": r.mismatch, "checks": list(r.checks), "basis": r.basis,
                         "explanation": r.explanation or None, "mean_matches_ci": r.mean_matches_ci})
        for t in r.tests:
            tests.append({**base, **plain(t), "row_status": r.status, "explanation": r.explanation or None})
    return {"tests": tests, "rows": out_rows, "counts": res.counts(), "skipped": list(res.skipped),
            "unexplained": [f"{r.study} {r.row}" for r in res.unexplained], "exit_code": res.exit_code}
