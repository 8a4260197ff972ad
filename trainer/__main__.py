"""One run process: ``python -m trainer RUN_DIR/spec.json`` (what ``prereg run --fresh-process``
launches; a worker of ``prereg run``, ``trainer.run_worker``, calls :func:`main` for each of its runs).

Prints one JSON progress line per iteration on stdout; user errors go to stderr as one line and
exit with code 2 (another writer holds the run, a refused plan, a corrupt log, a full disk); a run that is
already complete is left alone with exit code 3. SIGTERM stops the run cleanly (status ``stopped``; resumable from its last
checkpoint); SIGKILL leaves it ``running`` and equally resumable.
"""

from __future__ import annotations

import json
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m trainer RUN_DIR/spec.json", file=sys.stderr)
        return 2
    from prereg_kit.errors import DISK_FULL, PreregError, disk_full_line
    from prereg_kit.runlog import RunLogError
    from trainer.config import RunSpec

    def _stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        spec = RunSpec.load(args[0])
        from trainer.loop import train

        def progress(info: dict) -> None:
            print(json.dumps(info), flush=True)

        train(spec, progress=progress)
    except (PreregError, RunLogError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3 if getattr(e, "exit_code", 2) == 3 else 2
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk the writers did not name: one line, as a user error
        if e.errno not in DISK_FULL:
            raise
        print(f"error: {disk_full_line(e.filename, e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
