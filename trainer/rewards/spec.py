"""The recipe's reward spec: which channels, which aggregation rule, which anchor (docs/multi-reward.md,
"Wiring in the trainer"), checked without torch when a recipe is validated.

* ``channels``: ``["correct", "negative"]`` or tables ``{name = "brief", threshold = 20}``; the
  ``correct`` channel uses the recipe's ``reward_verifier`` unless it names its own ``verifier``.
* ``aggregation``: a ``parse_aggregation`` table (``rule``, ``lam``, ``beta``, ``tau``, ...);
  ``{}`` is the rule ``additive`` (the table's default), ``primary`` trains on the anchor alone.
* ``anchor``: ``""`` keeps ``aggregation.anchor`` (an index, default 0 = the first channel); a
  channel name selects that channel; ``"elected"`` reads ``<study>/election.json`` (written by
  ``prereg elect``) when the run starts.

A code task (``task = "code"``) without ``channels`` trains on ``program_correct`` alone; the math
channels ``correct`` and ``negative`` are refused on code tasks, program channels on math tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prereg_kit.runlog import ELECTION_FILE
from trainer.errors import ConfigError
from trainer.rewards.aggregation import parse_aggregation

if TYPE_CHECKING:
    from trainer.rewards.channels import Channel

# The channel table (trainer.rewards.channels: the verifiers, the problem formats, the sandbox) is
# imported by the functions that read channels: `prereg lock` and `prereg verify` check every
# recipe through this module and must start fast when a plan names no channels.

__all__ = ["CODE_DEFAULT_CHANNEL", "ELECTION_FILE", "build_channels", "channel_spec", "check_reward_config",
           "read_election"]


CODE_DEFAULT_CHANNEL = "program_correct"  # a code task's reward when the recipe lists no channels
MATH_ONLY = ("correct", "negative")  # channels that read a final answer with the math verifier
CODE_CREDIT = ("outcome",)  # dense rules score continuations with the math verifier




def channel_spec(item: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        return item, {}
    d = dict(item)
    name = d.pop("name", None)
    if not isinstance(name, str):
        raise ValueError("channels: a channel table needs name = \"<channel>\"")
    return name, d


def build_channels(cfg) -> list[Channel]:
    """The recipe's channels (``correct`` gets the recipe's verifier unless it names one); a code
    task without channels: ``program_correct``."""
    from trainer.rewards.channels import get_channel

    out = []
    for item in cfg.rewards.channels or ([CODE_DEFAULT_CHANNEL] if cfg.task.name == "code" else []):
        name, params = channel_spec(item)
        if name == "correct":
            params.setdefault("verifier", cfg.rewards.verifier)
        out.append(get_channel(name, **params))
    return out


def check_reward_config(cfg) -> None:
    """Validate the multi-reward block of a recipe; ValueErrors (one line) for pydantic."""
    try:
        agg = parse_aggregation(cfg.rewards.aggregation)
    except ConfigError as e:
        raise ValueError("; ".join(e.lines)) from None
    code = cfg.task.name == "code"
    if code and cfg.credit.rule not in CODE_CREDIT:
        raise ValueError(f"task.name = 'code': credit.rule {cfg.credit.rule!r} scores continuations with the math verifier; "
                         "use credit.rule = 'outcome'")
    if code and cfg.selection.rule == "dynamic":
        raise ValueError("task.name = 'code': selection.rule 'dynamic' checks groups with the math verifier; "
                         "use another selection rule")
    if not cfg.rewards.channels:
        if cfg.rewards.aggregation or cfg.rewards.anchor:
            raise ValueError("rewards.aggregation/anchor need rewards.channels (e.g. channels = [\"correct\", \"negative\"])")
        return
    from trainer.rewards.channels import get_channel

    names = []
    for item in cfg.rewards.channels:
        name, params = channel_spec(item)
        if get_channel(name, **params).needs_program and not code:  # unknown names / parameters: ValueError
            raise ValueError(f"rewards.channels: {name!r} judges programs: it needs task.name = 'code' (problems with tests, "
                             "the sandbox)")
        if code and name in MATH_ONLY:
            raise ValueError(f"rewards.channels: {name!r} reads a final answer with the math verifier; task.name = 'code' "
                             f"judges programs (use {CODE_DEFAULT_CHANNEL!r})")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"rewards.channels: a channel is listed twice ({', '.join(names)})")
    if cfg.rewards.anchor and cfg.rewards.anchor != "elected" and cfg.rewards.anchor not in names:
        raise ValueError(f"rewards.anchor: {cfg.rewards.anchor!r} is not one of the channels ({', '.join(names)}) nor 'elected'")
    if agg.anchor >= len(names):
        raise ValueError(f"rewards.aggregation: anchor {agg.anchor} out of range for {len(names)} channels")
    K = len(names)
    if agg.rule == "weighted" and len(agg.weights or ()) != K:
        raise ValueError(f"rewards.aggregation: rule 'weighted' needs {K} weights, got {len(agg.weights or ())}")
    if agg.rule == "tag" and not isinstance(agg.lam, (int, float)) and len(agg.lam) != K - 1:
        raise ValueError(f"rewards.aggregation: rule 'tag' needs one λ per auxiliary channel ({K - 1}), got {len(agg.lam)}")


def read_election(study_dir: str | Path) -> dict[str, Any]:
    """``<study>/election.json`` (``prereg elect``); a clear ConfigError when it is missing."""
    path = Path(study_dir) / ELECTION_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no anchor election; rewards.anchor = 'elected' needs it: run `prereg elect {study_dir}` first") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable election record ({e.msg})") from None
    if not isinstance(data.get("elected"), str):
        raise ConfigError(f"{path}: the election record names no elected channel")
    return data
