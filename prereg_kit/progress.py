"""Progress over a list of work (contrasts, simulated studies): a bar on a terminal, a plain line
at most every few seconds into a log, so a long analysis or dry run is seen to move either way."""

from __future__ import annotations


def progress(items, wanted: bool | None, label: str):
    """Yield ``items``; show a rich bar on a terminal (``wanted`` None) or when asked, plain
    lines when not on a terminal and not asked either way, nothing when ``wanted`` is False."""
    import sys

    show = wanted if wanted is not None else sys.stderr.isatty()
    if not show:
        yield from (progress_lines(items, label) if wanted is None else items)
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=len(items))
        for it in items:
            yield it
            bar.advance(task)


def progress_lines(items, label: str, every: float = 5.0):
    """Not a terminal: ``label: i/n (t s)`` on stderr at most every ``every`` s (a log shows it move)."""
    import sys
    import time

    t0 = last = time.monotonic()
    for i, it in enumerate(items, 1):
        yield it
        now = time.monotonic()
        if now - last >= every:
            last = now
            print(f"{label}: {i}/{len(items)} ({now - t0:.0f} s)", file=sys.stderr, flush=True)


def shown_path(path) -> str:
    """``path`` as a progress or result line names it: relative to the current directory when it
    lies under it (as a user would type it), else as given; a relative path is left as typed."""
    from pathlib import Path

    p = Path(path)
    if not p.is_absolute():
        return str(p)
    here = Path.cwd().resolve()
    for q in (p, p.resolve()):
        if q.is_relative_to(here):
            return str(q.relative_to(here))
    return str(p)
