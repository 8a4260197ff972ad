"""What every ``prereg`` command shares: the consoles, the error handler, option parsing helpers.

Command modules (``cli``, ``cli.run``, ``cli.status``) import from here, so a command can live in
a module of its own without importing ``cli`` (which imports them).
"""

from __future__ import annotations

import functools
import os

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ..errors import DISK_FULL, PreregError, disk_full_line, extra_for


def _console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)
    if not c.is_terminal:
        c.width = 160  # tables in logs and pipes: don't squeeze them to 80 columns
    return c


out = out_console = _console()
err = _console(stderr=True)


INTERNAL_ERROR = 3  # exit code of a bug in prereg-kit: never 1, which means a violation
TRACEBACK_ENV = "PREREG_TRACEBACK"


# The usage errors typer raises (click's ClickException, or the copy typer 0.29 ships): found from
# typer's own BadParameter, so that importing click (~25 ms, not a dependency of typer 0.29) is left out.
# With the typer versions built on click, typer.Exit and typer.Abort are click's Exit and Abort.
CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _command_path() -> str:
    """The command being run as the user typed it (``prereg run``), from the click context (click's
    own, or the copy typer 0.29 ships, found from typer's Context like CLICK_EXCEPTION)."""
    import importlib  # only on an error path

    base = next(c for c in typer.Context.__mro__ if c.__name__ == "Context" and c.__module__.endswith(".core"))
    try:
        ctx = importlib.import_module(base.__module__.rpartition(".")[0] + ".globals").get_current_context(silent=True)
    except (ImportError, AttributeError):
        ctx = None
    return ctx.command_path if ctx is not None else "this command"


RUNNER_HELP = "Trainer to use when several are installed (entry points of group prereg_kit.runners)."


def handles_errors(fn):
    """Turn :class:`PreregError` into its lines on stderr and its exit code; never show a traceback.

    Memory or stack exhausted by an input is unusable input (exit 2), and so is a full disk (one line
    naming the file: :func:`prereg_kit.errors.writing` names it where the system does not) and a
    missing module that one of prereg-kit's extras brings (one line naming the extra); any other exception is
    reported in one line as an internal error (exit 3) unless ``PREREG_TRACEBACK`` is set.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PreregError as e:
            for line in e.lines:
                err.print(f"[red]error:[/red] {escape(line)}" if not line.startswith("  ") else escape(line), soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, CLICK_EXCEPTION):
            raise  # the command's own exit
        except (MemoryError, RecursionError) as e:
            if os.environ.get(TRACEBACK_ENV):
                raise
            what = "memory" if isinstance(e, MemoryError) else "the stack"
            err.print(f"[red]error:[/red] the input exhausted {what} ({type(e).__name__}): it is too large or nested too deep",
                      soft_wrap=True)
            raise typer.Exit(2) from None
        except Exception as e:  # the last line of defence against a traceback
            if os.environ.get(TRACEBACK_ENV):
                raise
            full = _disk_full(e)
            if full is not None:  # a write no named place caught: the file, where the system names it
                err.print("[red]error:[/red] " + escape(disk_full_line(full.filename, full)), soft_wrap=True)
                raise typer.Exit(2) from None
            module = (getattr(e, "name", None) or "").partition(".")[0] if isinstance(e, ModuleNotFoundError) else ""
            extra = extra_for(module) if module else None
            if extra is not None:  # an optional package this command needs: name the extra that brings it
                err.print("[red]error:[/red] " + escape(f"{_command_path()} needs {module}, which is not installed: "
                                                       f"pip install 'prereg-kit[{extra}]'"), soft_wrap=True)
                raise typer.Exit(2) from None
            _internal(e)

    return wrapper


def _internal(e: BaseException) -> None:
    """Report ``e`` as a bug in prereg-kit in one line and exit 3."""
    first = " ".join(str(e).split())[:300]
    err.print(f"[red]error:[/red] internal error in prereg-kit: {escape(type(e).__name__)}: {escape(first)} "
              f"(a bug; {TRACEBACK_ENV}=1 shows the traceback)", soft_wrap=True)
    raise typer.Exit(INTERNAL_ERROR) from None


def _disk_full(e: BaseException) -> OSError | None:
    """The full-disk error (ENOSPC, EDQUOT) that ``e`` is or was raised from, if any."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in DISK_FULL:
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def seed_list(items: list[str]) -> list[int]:
    """``["0", "2-4"]`` → ``[0, 2, 3, 4]``; a malformed item or a range of over 100000 seeds is refused."""
    out: list[int] = []
    for item in items:
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise PreregError(f"--seeds: expected seeds such as 0,1 or 0-3, got {item!r}")
        first, last = int(lo), int(hi or lo)
        if last < first or last - first >= 100_000:
            raise PreregError(f"--seeds: {item!r} is not a range of at most 100000 seeds with first <= last")
        out += list(range(first, last + 1))
    return out


def split_values(values: list[str] | None) -> list[str] | None:
    """``["a,b", "c"]`` → ``["a", "b", "c"]``; None or empty → None (an option that was not given)."""
    return None if not values else [x.strip() for v in values for x in v.split(",") if x.strip()]


class _Flag(TyperOption):
    """An on/off option: no value follows it, so its help shows no type (typer 0.29 writes ``<bool>``)."""

    def display_type_rich(self, ctx) -> str | None:
        return None if self.is_flag else super().display_type_rich(ctx)


class _Argument(TyperArgument):
    """A positional argument shown as click and POSIX usage write it: STUDY_DIR, [STUDY_DIR] when optional.

    typer 0.29 writes the Python name, and ``{study_dir}`` in the usage line for a required one.
    """

    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else self.name.upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


def _plain_param(param) -> None:
    if type(param) is TyperOption:
        param.__class__ = _Flag  # same state, one overridden display method
    elif type(param) is TyperArgument:
        param.__class__ = _Argument


def _plain_help_option(option):
    """The help option, made by click on first use, gets the same display as the declared options."""
    if option is not None:
        _plain_param(option)
    return option


class _PlainCommand(TyperCommand):
    def get_help_option(self, ctx):
        return _plain_help_option(super().get_help_option(ctx))


class PreregGroup(TyperGroup):
    """The ``prereg`` group: flags without a type, arguments in capitals in every command's ``--help``.

    Built once per invocation from the finished command tree (plugins' commands included), so no
    command needs its own setting and nothing global changes.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        _plain_help(self)

    def get_help_option(self, ctx):
        return _plain_help_option(super().get_help_option(ctx))


def _plain_help(command) -> None:
    """Give ``command``, its parameters and its subcommands, to any depth, the help display above."""
    if type(command) is TyperCommand:
        command.__class__ = _PlainCommand  # same state: only the help option's display differs
    elif type(command) is TyperGroup:
        command.__class__ = PreregGroup
    for param in command.params:
        _plain_param(param)
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)
