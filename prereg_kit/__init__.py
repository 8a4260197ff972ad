"""prereg-kit: preregistered, matched-compute validation of RL training interventions.

The core package needs no torch: plans, locks, run logs, readings, statistics, analysis, report.

``import prereg_kit as pk`` is also the notebook API (docs/python-api.md): ``pk.analyze``,
``pk.load_report``, ``pk.write_report``, ``pk.dry_run``, ``pk.verify``, ``pk.load_plan``,
``pk.stats``, ``pk.plots``, ``pk.PreregError``. Each loads on first use (a module
``__getattr__``), so ``import prereg_kit`` itself loads neither pandas nor matplotlib.
"""

from .errors import PreregError

__version__ = "0.1.0"

_API = ("load_report", "write_report", "dry_run", "load_plan", "Report", "Analysis", "DryRun", "VerifyReport")
__all__ = ["analyze", "verify", "stats", "plots", *_API, "PreregError", "__version__"]


def __getattr__(name: str):
    # a submodule is imported with `import prereg_kit.x`: `from . import x` would call back here
    if name == "analyze":
        from .analysis import analyze  # callable: pk.analyze(study) is analyze_study(study)

        return analyze
    elif name == "verify":
        from .study import verify  # callable: pk.verify(study) is verify_study(study)

        return verify
    elif name == "stats":
        import prereg_kit.stats  # noqa: F401 - the module itself is the attribute
    elif name == "plots":
        from .report import plots

        return plots
    elif name in _API:
        from . import api

        return getattr(api, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
