"""Finding the trainer that ``prereg run`` and ``prereg elect`` hand a study to.

The core names no trainer. A trainer plugs in through the entry-point group
``prereg_kit.runners``: an object with ``run(study_dir, *, stage, configs, seeds, n_jobs, console)``
(returns True when no run failed) and ``elect(study_dir, *, configuration, seeds, tokens, steps,
prompts, samples, n_jobs, log)`` (returns the election record: ``elected``, ``kl_rev``,
``kl_fwd``), and optionally ``check_configuration(plan, configuration)`` (the lines saying why it
cannot run that configuration, each ``recipe: <key>: <message>``; empty when it can; ``prereg
registry`` shows them, ``prereg lock`` refuses on them) and ``recipe_keys()`` (every valid dotted
recipe key, from which ``prereg lock`` names the closest to an unknown one). The built-in GRPO
trainer registers itself as ``builtin`` (``pip install
'prereg-kit[train]'``); see ``docs/trainer.md``.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ..errors import PreregError

GROUP = "prereg_kit.runners"
NONE_INSTALLED = ("no trainer installed: pip install 'prereg-kit[train]' for the built-in one, "
                  f"or install a package that registers a '{GROUP}' entry point")


def installed_runners() -> dict[str, EntryPoint]:
    """The runners installed in this environment, by name (an entry point listed twice counts once)."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def load_runner(name: str | None = None, *, command: str = "run", found: dict[str, EntryPoint] | None = None) -> Any:
    """The runner named ``name``, or the only one installed (``found``: :func:`installed_runners`
    when the caller has it already; each reading scans every installed package's metadata).

    Exit code 2 (:class:`PreregError`) when none is installed, when several are and ``--runner``
    does not choose, or when the chosen one is not installed; a runner whose own dependencies are
    missing (torch, transformers) is named with the extra that brings them.
    """
    found = installed_runners() if found is None else found
    if not found:
        raise PreregError(NONE_INSTALLED)
    if name is None:
        if len(found) > 1:
            raise PreregError(f"several trainers are installed ({', '.join(sorted(found))}): choose one with --runner NAME")
        name = next(iter(found))
    if name not in found:
        raise PreregError(f"--runner: no trainer {name!r} is installed (installed: {', '.join(sorted(found))})")
    try:
        return found[name].load()
    except ImportError as e:  # torch / transformers are the 'train' extra
        raise PreregError(f"prereg {command} needs the trainer's dependencies (pip install prereg-kit[train]): {e}") from None


def configuration_problems(runner: Any, plan: Any) -> dict[str, list[str]] | None:
    """Per configuration of ``plan``, the lines saying why ``runner`` cannot run it (an empty list:
    it can); None when the runner has no ``check_configuration``. A configuration the plan marks
    ``runnable = false`` is not runnable for the plan's reason and is never passed to the check."""
    check = getattr(runner, "check_configuration", None)
    if check is None:
        return None
    return {name: [f"runnable = false: {c.not_runnable}"] if not c.runnable else list(check(plan, name))
            for name, c in plan.configurations.items()}
