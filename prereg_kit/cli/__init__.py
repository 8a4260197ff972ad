"""The ``prereg`` command (``prereg_kit.cli:main``): its tree lives in ``commands``.

The package loads ``commands`` on first use of a name (``app``, ``main``, ...), so the modules
every command shares (``base``, ``jsonout``) import without the command tree: a plugin's command
module imports them while the tree is loading it.
"""


def __getattr__(name: str):
    if name == "commands" or name.startswith("__"):  # the import system's own questions
        raise AttributeError(name)
    from . import commands
    return getattr(commands, name)
