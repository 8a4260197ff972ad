"""``prereg export {osf,aspredicted} STUDY --out DIR``: the locked plan as a registry's
preregistration (:mod:`prereg_kit.study.export`), with the chain's head and receipts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .base import PreregGroup, handles_errors, out

export_app = typer.Typer(name="export", no_args_is_help=True, cls=PreregGroup,
                         help="Write the locked plan as a registry's preregistration (OSF, AsPredicted), with the chain's head.")

StudyArg = Annotated[Path, typer.Argument(help="Study folder (plan.toml, plan.lock) or its plan.toml.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder for the registration (markdown, JSON, receipts).")]


def _export(registry: str, study_dir: Path, out_dir: Path) -> None:
    from ..study.export import export_registration

    res = export_registration(study_dir, registry, out_dir)
    out.print(escape(f"wrote {res.markdown} and {res.json}"), soft_wrap=True)
    h = res.head
    out.print(escape(f"  head: entry {h['index']} ({h['kind']}, {h['time']}) {h['hash']}"), soft_wrap=True)
    out.print(f"  {len(res.receipts)} timestamp receipt(s) copied" if res.receipts else "  no timestamp receipts (none kept in timestamps/)")
    out.print(escape(f"  a reader checks the study with: {res.verify.replace('STUDY', str(study_dir))}"), soft_wrap=True)


@export_app.command("osf")
@handles_errors
def osf(study_dir: StudyArg, out_dir: OutOpt) -> None:
    """The OSF Preregistration template's fields: hypotheses, design, sampling, variables, analysis plan."""
    _export("osf", study_dir, out_dir)


@export_app.command("aspredicted")
@handles_errors
def aspredicted(study_dir: StudyArg, out_dir: OutOpt) -> None:
    """AsPredicted's eight questions."""
    _export("aspredicted", study_dir, out_dir)
