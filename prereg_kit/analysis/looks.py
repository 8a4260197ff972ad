"""Interim and final looks of a sequential plan (``[sequential]``): which look the runs allow,
the plan restricted to that look's seeds, the spent α inside each Holm family, the decision, the
record of the look in the lock chain, and the looks of simulated studies (``prereg dry-run``).

The rule (docs/statistics.md, "Sequential looks"; :mod:`prereg_kit.stats.group_sequential`): at
look k the looked-at contrasts are read on the first ``looks[k]`` seeds of the plan's seed list;
each contrast's two-sided paired-t p is turned into its repeated p-value (the smallest total α
whose look-k boundary, under the plan's spending function, the p crosses) and Holm at the family's
α runs on these. The boundaries are on the t scale at each look's degrees of freedom
(:func:`look_units`; :mod:`prereg_kit.stats.sequential_t`); a contrast whose test is not the t
(Wilcoxon, sign-flip, a bootstrap) compares its test's p with the z boundaries. A contrast Holm rejects stops for efficacy; at an interim look one whose
conditional power under the current trend (at the final boundary of its Bonferroni share α/m) is
below the futility bound stops for futility (non-binding); the others continue. The study stops
when no looked-at contrast continues. A contrast rejected at an earlier recorded look stays
rejected (its recorded repeated p is kept when smaller).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd

from .. import stats
from ..chain.lock import Chain, read_chain
from ..chain.look_chain import FINAL, STOP, look_entries
from ..errors import PreregError
from ..plan import Plan
from ..plan.sequential import sequential_ids
from ..stats.group_sequential import (
    conditional_power,
    final_boundary,
    look_threshold,
    repeated_p,
    sequential_holm,
    z_of_p,
)
from ..stats.sequential_t import sequential_t_boundaries
from ..stats.tdist import t_isf
from .verdicts import adjust_and_read

LOOK_COLUMNS = ["look", "of", "seeds", "contrast", "scale", "df", "boundary", "boundary_z", "nominal_p", "spent_alpha",
                "statistic", "z", "p", "repeated_p", "conditional_power", "decision", "recorded"]


def _sig(x: Any) -> float | None:
    """A float as the chain stores it (10 significant digits; NaN as null)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return float(f"{float(x):.10g}")


def look_seeds(plan: Plan, look: int) -> list[int]:
    """The first ``looks[look]`` seeds of the plan's seed list (look is 1-based)."""
    return plan.all_seeds("main")[: plan.sequential.looks[look - 1]]


def complete_look(plan: Plan, present: set[tuple[str, int]]) -> int:
    """The last look whose seeds every configuration has a run of (0: not even the first)."""
    order, confs = plan.all_seeds("main"), list(plan.configurations)
    have = 0
    for s in order:
        if not all((c, s) in present for c in confs):
            break
        have += 1
    return max([k for k, n in enumerate(plan.sequential.looks, 1) if n <= have], default=0)


def choose_look(plan: Plan, present: set[tuple[str, int]], look: int | None) -> int:
    """The look to analyze: ``look`` when its seeds are all run, else the last complete one."""
    seq = plan.sequential
    if seq is None:
        if look is not None:
            raise PreregError("--look: the plan has no [sequential] table (no preregistered looks)")
        return 0
    k = complete_look(plan, present)
    if look is not None:
        if not 1 <= look <= len(seq.looks):
            raise PreregError(f"--look {look}: the plan preregisters looks 1 to {len(seq.looks)}")
        if look > k:
            allow = f"the runs allow look {k}" if k else "no look is complete yet"
            raise PreregError(f"--look {look}: it needs seeds {_seeds(look_seeds(plan, look))} of every configuration; "
                              f"runs are missing ({allow})")
        return look
    if k == 0:
        raise PreregError(f"the first look needs seeds {_seeds(look_seeds(plan, 1))} of every configuration; "
                          "not all have run")
    return k


def _seeds(s: list[int]) -> str:
    return ", ".join(map(str, s))


def plan_at_look(plan: Plan, look: int) -> Plan:
    """The plan as look ``look`` reads it: the study's, its main stage's and its configurations'
    seeds cut to the look's seeds (not re-validated)."""
    keep = look_seeds(plan, look)
    study = plan.study.model_copy(update={"seeds": keep})
    confs = {n: (c.model_copy(update={"seeds": keep}) if c.seeds is not None else c) for n, c in plan.configurations.items()}
    stages = [s.model_copy(update={"seeds": keep}) if s.name == "main" and s.seeds is not None else s for s in plan.stages]
    return plan.model_copy(update={"study": study, "configurations": confs, "stages": stages})


def runs_at_look(runs: Any, seeds: list[int]) -> Any:
    """A study's runs (``StudyRuns``) with only the main runs of ``seeds`` (other stages kept)."""
    def cut(df: pd.DataFrame) -> pd.DataFrame:
        return df if "seed" not in df else df[df["seed"].isin(seeds)].reset_index(drop=True)
    meta = runs.meta
    keep = (meta["stage"] != "main") | meta["seed"].isin(seeds)
    return dataclasses.replace(runs, meta=meta[keep].reset_index(drop=True), iterations=cut(runs.iterations),
                               evals=cut(runs.evals))


def _design(plan: Plan) -> tuple[tuple[float, ...], str, float]:
    seq = plan.sequential
    return tuple(float(n) for n in seq.looks), seq.spending, float(seq.rho or 2.0)


def look_units(plan: Plan, cid: str) -> tuple[int, ...] | None:
    """The units contrast ``cid``'s paired t has at each look: the look's seeds, times the pairs of
    a pooled contrast (one unit per (pair, seed)). None when the contrast's test is not the t: its
    p is then compared with the z boundaries."""
    c = next((c for c in plan.contrasts if c.id == cid), None)
    if c is None or c.test != "t":
        return None
    per_seed = len(c.arm_pairs()) if c.design == "pooled" else 1
    return tuple(n * per_seed for n in plan.sequential.looks)


def prepare_look(rows: pd.DataFrame, plan: Plan, look: int, chain: Chain | None = None) -> pd.DataFrame:
    """Before Holm: each looked-at contrast's ``tested_p`` becomes its repeated p at ``look`` (the
    look's own p kept as ``look_p``); one rejected at an earlier recorded look keeps the smaller."""
    info, spending, rho = _design(plan)
    ids = set(sequential_ids(plan))
    earlier = _earlier_rejections(chain, look)
    rows = rows.copy()
    rows["look_p"] = np.nan
    for i, r in rows.iterrows():
        if r["contrast"] not in ids or "tested_p" not in rows or pd.isna(r.get("tested_p")):
            continue
        rp = repeated_p(float(r["tested_p"]), info, look, spending=spending, rho=rho, units=look_units(plan, r["contrast"]))
        if r["contrast"] in earlier:
            rp = min(rp, earlier[r["contrast"]])
        rows.at[i, "look_p"] = r["tested_p"]
        rows.at[i, "tested_p"] = rp
    return rows


def _earlier_rejections(chain: Chain | None, look: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in look_entries(chain) if chain is not None else []:
        if e.get("look", 0) < look:
            for c in e.get("contrasts", []):
                if c.get("decision") == "stop: efficacy" and c.get("repeated_p") is not None:
                    out[c["contrast"]] = min(out.get(c["contrast"], 1.0), c["repeated_p"])
    return out


def decide_look(contrasts: pd.DataFrame, plan: Plan, look: int) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """After Holm: each looked-at contrast's decision at ``look``, the rows of the sequential
    table (``LOOK_COLUMNS``) and the study's decision. At an interim look a contrast that
    continues reads ``continue to look k+1`` as its verdict."""
    seq = plan.sequential
    info, spending, rho = _design(plan)
    K = len(info)
    ids = sequential_ids(plan)
    seeds = look_seeds(plan, look)
    out, table, decisions = contrasts.copy(), [], []
    for fam in plan.families:
        members = [m for m in fam.members if m in ids]
        m = len(fam.members)
        for cid in members:
            hit = out.index[out["contrast"] == cid]
            if not len(hit):
                continue
            i = hit[0]
            r = out.loc[i]
            units = look_units(plan, cid)
            c_final = final_boundary(fam.alpha / m, info, spending, rho, units=units)
            p = float(r["look_p"]) if pd.notna(r.get("look_p")) else math.nan
            rejected = pd.notna(r["p_adjusted"]) and r["p_adjusted"] <= fam.alpha
            z = z_of_p(p) if math.isfinite(p) else math.nan
            cp = conditional_power(z, info, look, c_final) if math.isfinite(z) and look < K else math.nan
            if look == K:
                decision = f"{FINAL}: {r['verdict']}"
            elif rejected:
                decision = f"{STOP}: efficacy"
            elif seq.futility.kind == "conditional-power" and math.isfinite(cp) and cp < seq.futility.below:
                decision = f"{STOP}: futility"
            else:
                decision = f"continue to look {look + 1}"
                out.at[i, "verdict"] = decision
                out.at[i, "verdict_reason"] = (f"look {look} of {K} on {len(seeds)} seeds: repeated p {r['tested_p']:.3g} "
                                               f"above the family's α {fam.alpha:g}; conditional power {cp:.2f}")
            decisions.append(decision)
            a = fam.alpha / m  # the contrast's Bonferroni share: its boundary before Holm passes shares on
            nominal = look_threshold(a, info, look, spending, rho, units=units)
            cum = float(stats.sequential.spending_function(np.array([info[look - 1] / info[-1]]), a, spending, rho)[0])
            if units is None:
                scale, df, boundary, statistic = "z", math.nan, z_of_p(nominal), z
            else:
                df = units[look - 1] - 1
                scale, boundary = "t", sequential_t_boundaries(units, a, spending, rho=rho).t[look - 1]
                statistic = t_isf(p / 2.0, df) if math.isfinite(p) else math.nan
            table.append({"look": look, "of": K, "seeds": _seeds(seeds), "contrast": cid, "scale": scale, "df": df,
                          "boundary": boundary, "boundary_z": z_of_p(nominal), "nominal_p": nominal,
                          "spent_alpha": a if look == K else cum, "statistic": statistic, "z": z, "p": p,
                          "repeated_p": float(r["tested_p"]), "conditional_power": cp, "decision": decision,
                          "recorded": ""})
    if look == K:
        study = FINAL
    elif decisions and all(d == f"{STOP}: efficacy" for d in decisions):
        study = f"{STOP}: efficacy"
    elif decisions and not any(d.startswith("continue") for d in decisions):
        study = f"{STOP}: futility"
    else:
        study = f"continue to look {look + 1}"
    return out, pd.DataFrame(table, columns=LOOK_COLUMNS), study


def look_fields(plan: Plan, look: int, table: pd.DataFrame, decision: str, chain: Chain) -> dict[str, Any]:
    """The lock-chain entry of a look (``look_chain.record_look``)."""
    last = chain.last
    return {"look": look, "looks": list(plan.sequential.looks), "spending": plan.sequential.spending + (f" (rho = {plan.sequential.rho:g})" if plan.sequential.rho else ""),
            "seeds": look_seeds(plan, look), "configurations": list(plan.configurations), "decision": decision,
            "plan_entry": last["index"], "plan_hash": last["content_sha256"],
            "contrasts": [{"contrast": r.contrast, "p": _sig(r.p), "repeated_p": _sig(r.repeated_p), "scale": r.scale,
                           **({"df": int(r.df), "boundary": _sig(r.boundary)} if r.scale == "t" else {}),
                           "boundary_z": _sig(r.boundary_z), "nominal_p": _sig(r.nominal_p), "spent_alpha": _sig(r.spent_alpha),
                           "conditional_power": _sig(r.conditional_power), "decision": r.decision}
                          for r in table.itertuples()]}


def recorded_looks(chain: Chain | None, look: int) -> pd.DataFrame:
    """The sequential-table rows of the looks recorded before ``look`` (from their chain entries)."""
    rows = []
    for e in look_entries(chain) if chain is not None else []:
        if e.get("look", 0) >= look:
            continue
        for c in e.get("contrasts", []):
            p = c.get("p")
            z = z_of_p(p) if p is not None else math.nan
            t_scale = c.get("scale") == "t"  # a look recorded before the t boundaries has z ones
            df = c.get("df") if t_scale else math.nan
            statistic = (t_isf(p / 2.0, df) if p is not None else math.nan) if t_scale else z
            rows.append({"look": e["look"], "of": len(e.get("looks", [])), "seeds": _seeds(e.get("seeds", [])),
                         "contrast": c.get("contrast"), "scale": "t" if t_scale else "z", "df": df,
                         "boundary": c.get("boundary") if t_scale else c.get("boundary_z"),
                         "boundary_z": c.get("boundary_z"), "nominal_p": c.get("nominal_p"),
                         "spent_alpha": c.get("spent_alpha"), "statistic": statistic, "z": z, "p": p,
                         "repeated_p": c.get("repeated_p"), "conditional_power": c.get("conditional_power"),
                         "decision": c.get("decision"), "recorded": f"entry {e['index']} ({e['time']})"})
    return pd.DataFrame(rows, columns=LOOK_COLUMNS)


@dataclasses.dataclass
class SequentialLook:
    """The look an analysis read: its number, the study's decision, the sequential table (the
    looks recorded before it, then this one), the fields of its lock-chain entry and notes on
    recorded looks whose boundary the current rule puts elsewhere (:func:`rule_changes`)."""

    look: int
    of: int
    decision: str
    table: pd.DataFrame
    fields: dict[str, Any]
    notes: list[str] = dataclasses.field(default_factory=list)


def rule_changes(chain: Chain | None, plan: Plan, look: int) -> list[str]:
    """One line per contrast of a recorded look (up to ``look``) whose recorded boundary differs
    from the one the current rule gives it, in nominal p or in scale (a look recorded by an earlier
    version, e.g. with z boundaries for a paired t): both boundaries at the contrast's Bonferroni
    share, and whether its recorded p falls on the same side of both thresholds, i.e. whether that
    look's decision stands."""
    info, spending, rho = _design(plan)
    share = {m: f.alpha / len(f.members) for f in plan.families for m in f.members}
    out = []
    for e in look_entries(chain) if chain is not None else []:
        k = e.get("look", 0)
        if not 1 <= k <= min(look, len(info)):
            continue
        for c in e.get("contrasts", []):
            cid, p, old = c.get("contrast"), c.get("p"), c.get("nominal_p")
            if cid not in share or p is None or old is None:
                continue
            units = look_units(plan, cid)
            new = look_threshold(share[cid], info, k, spending, rho, units=units)
            if abs(new - old) <= 1e-9 + 1e-6 * old and c.get("scale", "z") == ("z" if units is None else "t"):
                continue
            was = (f"t({c['df']}) {c['boundary']:.3f}" if c.get("scale") == "t" and c.get("boundary") is not None
                   else f"z {c.get('boundary_z', z_of_p(old)):.3f}")
            now = (f"t({units[k - 1] - 1}) {sequential_t_boundaries(units, share[cid], spending, rho=rho).t[k - 1]:.3f}"
                   if units is not None else f"z {z_of_p(new):.3f}")
            same = (p <= old) == (p <= new)
            out.append(f"look {k}, contrast {cid}: recorded (lock entry {e.get('index')}) against boundary {was} "
                       f"(nominal p {old:.4g}); the current rule's boundary is {now} (nominal p {new:.4g}"
                       + (", the same" if abs(new - old) <= 1e-9 + 1e-6 * old else "") + "); its p "
                       f"{p:.3g} is {'at or below' if p <= new else 'above'} the current threshold: "
                       + ("the recorded decision stands" if same else "the decision would differ under the current rule"))
    return out


def restrict_to_look(pf: Any, runs: Any, look: int | None, notes: list[str]) -> tuple[Any, Any, int]:
    """The plan file and runs as the look reads them (``look`` None: the last complete look);
    a plan without ``[sequential]`` passes through with look 0."""
    plan = pf.plan
    if plan.sequential is None and look is None:
        return pf, runs, 0
    main = runs.meta[runs.meta["stage"] == "main"]
    k = choose_look(plan, set(zip(main["configuration"], main["seed"].astype(int))), look)
    if not k:
        return pf, runs, 0
    K, seeds = len(plan.sequential.looks), look_seeds(plan, k)
    notes.append(f"sequential plan: look {k} of {K}, on seeds {_seeds(seeds)}"
                 + ("" if k == K else "; runs of later seeds are left out"))
    if k == K:
        return pf, runs, k
    return dataclasses.replace(pf, plan=plan_at_look(plan, k)), runs_at_look(runs, seeds), k


def read_look(rows: pd.DataFrame, plan: Plan, look: int, plan_path: Any, *, exploratory: bool,
              chain: Chain | None = None) -> tuple[pd.DataFrame, SequentialLook]:
    """Holm on the repeated p-values and the decisions of ``look`` (module rule). ``chain``: the
    study's lock chain when the caller has read it; read here otherwise (None when unreadable)."""
    if chain is None:
        try:
            chain = read_chain(plan_path)
        except PreregError:
            chain = None
    contrasts = adjust_and_read(prepare_look(rows, plan, look, chain), plan, exploratory=exploratory)
    contrasts, table, decision = decide_look(contrasts, plan, look)
    fields = look_fields(plan, look, table, decision, chain) if chain is not None else {}
    both = pd.concat([recorded_looks(chain, look), table], ignore_index=True) if chain is not None else table
    return contrasts, SequentialLook(look, len(plan.sequential.looks), decision, both, fields,
                                     rule_changes(chain, plan, look))


# ------------------------------------------------------------------------------ simulated looks


def looks_of_differences(d: dict[str, np.ndarray], plan: Plan) -> list[str]:
    """The decisions of every look of one study, from each looked-at contrast's per-unit
    differences ``d`` (in the plan's seed order, the full study): the paired-t p on the first
    ``looks[k]`` seeds' units (:func:`look_units`), then the module's rule with the t boundaries
    (futility as the plan says). Returns, per look, the study's decision; the looks after a stop
    are not taken. For ``prereg dry-run --repeat`` and the error simulations."""
    seq = plan.sequential
    info, spending, rho = _design(plan)
    K = len(info)
    out: list[str] = []
    rejected: dict[str, bool] = {}
    # the statistic here is always the paired t, whatever test the analysis names
    units = {m: look_units(plan, m) or tuple(seq.looks) for m in d}
    for k in range(1, K + 1):
        decisions = []
        for fam in plan.families:
            members = [m for m in fam.members if m in d]
            if not members:
                continue
            p = [stats.paired_t(d[m][:units[m][k - 1]]).p for m in members]
            rej = sequential_holm(p, fam.alpha, info, k, spending=spending, rho=rho,
                                  already=[rejected.get(m, False) for m in members], units=[units[m] for m in members])
            for m, pv, r in zip(members, p, rej):
                c_final = final_boundary(fam.alpha / len(fam.members), info, spending, rho, units=units[m])
                rejected[m] = bool(r)
                if k == K:
                    decisions.append("reject" if r else "accept")
                elif r:
                    decisions.append(f"{STOP}: efficacy")
                elif seq.futility.kind == "conditional-power" and \
                        conditional_power(z_of_p(pv), info, k, c_final) < seq.futility.below:
                    decisions.append(f"{STOP}: futility")
                else:
                    decisions.append("continue")
        if k == K:
            out.append("final: efficacy" if any(rejected.values()) else "final: none")
            break
        if decisions and not any(x == "continue" for x in decisions):
            out.append(f"{STOP}: efficacy" if all(x == f"{STOP}: efficacy" for x in decisions) else f"{STOP}: futility")
            break
        out.append("continue")
    return out


def per_seed_differences(per_seed: pd.DataFrame, plan: Plan) -> dict[str, np.ndarray]:
    """Each looked-at contrast's per-seed differences (an analysis's ``per_seed``) in the plan's seed order."""
    order = {s: i for i, s in enumerate(plan.all_seeds("main"))}
    out = {}
    for cid in sequential_ids(plan):
        g = per_seed[per_seed["contrast"] == cid]
        g = g.assign(_o=g["seed"].map(order)).sort_values("_o")
        out[cid] = g["difference"].to_numpy(dtype=float)
    return out


def looks_power(runs: list[list[str]], plan: Plan) -> pd.DataFrame:
    """Per look, the share of simulated studies that stopped there for efficacy or futility, and
    the share that rejected some looked-at contrast by then (at the last look: the power)."""
    K = len(plan.sequential.looks)
    n = len(runs)
    rows, rejected = [], 0
    for k in range(1, K + 1):
        at = [r[k - 1] for r in runs if len(r) >= k]
        eff = sum(x in (f"{STOP}: efficacy", "final: efficacy") for x in at)
        fut = sum(x == f"{STOP}: futility" for x in at)
        rejected += eff
        rows.append({"look": k, "seeds": plan.sequential.looks[k - 1], "repeats": n,
                     "stop_efficacy": eff / n if n else math.nan, "stop_futility": fut / n if n else math.nan,
                     "rejected_by_look": rejected / n if n else math.nan})
    return pd.DataFrame(rows)
