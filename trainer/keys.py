"""Near misses of settings keys: an unknown key path named with the valid one it most likely
meant (``credit.mc_kk`` → ``credit.mc_k``; ``rollout.mc_k`` → ``credit.mc_k``; the deprecated
flat ``mc_kk`` → ``credit.mc_k``). No torch, no settings models: the caller passes the keys."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

__all__ = ["suggest"]

CUTOFF = 0.75  # difflib ratio below which no key is offered (a wrong guess misleads more than none)


def suggest(path: str, sections: Mapping[str, Sequence[str]], flat: Mapping[str, tuple[str, str]]) -> str:
    """``; did you mean 'section.key'?`` for the unknown dotted ``path``, or "" when nothing is close.

    In order: the same key in another section (a key in the wrong place, or a flat key written
    inside a section), then the nearest key within the path's own section, then the nearest
    path overall. A deprecated flat key is named by its sectioned place.
    """
    paths = [f"{name}.{key}" for name, keys in sections.items() for key in keys]
    section, _, last = path.rpartition(".")
    close = [p for p in paths if p.rpartition(".")[2] == last and p != path]
    if not close and section and last in flat:
        close = [".".join(flat[last])]
    if not close and section in sections:
        close = [f"{section}.{k}" for k in difflib.get_close_matches(last, list(sections[section]), n=1, cutoff=CUTOFF)]
    if not close:
        close = difflib.get_close_matches(path, paths + list(sections) + list(flat), n=1, cutoff=CUTOFF)
    if close and close[0] in flat and close[0] not in sections:
        close = [".".join(flat[close[0]])]  # the canonical place, not the deprecated alias
    return f"; did you mean {close[0]!r}?" if close else ""
