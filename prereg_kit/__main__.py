"""``python -m prereg_kit`` is the ``prereg`` command."""

from .cli import main

main()
