"""A module that can be called: ``pk.analyze(study)`` and ``pk.verify(study)``.

``prereg_kit.analysis.analyze`` and ``prereg_kit.study.verify`` are modules, and Python's import system sets a
package attribute to its submodule whenever the submodule is imported, so a function of the same
name on the package would be overwritten. Instead the module itself is made callable: every
``import prereg_kit.analysis.analyze`` keeps working, and calling the module calls its main function.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def callable_module(name: str, function: Callable[..., Any]) -> None:
    """Make the loaded module ``name`` callable: ``module(*args, **kw)`` is ``function(*args, **kw)``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    __call__.__doc__ = function.__doc__  # help(pk.analyze) on the call shows what it computes
    module = sys.modules[name]
    module.__class__ = type(f"{name.rpartition('.')[2]}_module", (types.ModuleType,), {"__call__": __call__})
