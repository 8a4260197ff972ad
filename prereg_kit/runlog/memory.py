"""Handing freed memory back to the system between the steps of a large analysis.

At hundreds of runs a study's rows are freed and allocated again in steps of tens of MiB
(per-run Arrow tables, then one frame, then a set's rows, then its curves). glibc's allocator
keeps freed pages of its heap for reuse instead of returning them, so the process's resident
size — what the machine and a cluster's memory limit see — grows by what earlier steps freed:
at 960 runs about 0.5 GiB above the rows that are alive. :func:`release_memory` asks Arrow's
pool and glibc (``malloc_trim``) to return what is free; elsewhere it does nothing. Nothing here
changes an allocator's settings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import lru_cache


@lru_cache(maxsize=1)
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # glibc only; musl and others lack it
    except (OSError, AttributeError):
        return None


def release_memory() -> None:
    """Return freed memory to the system: Arrow's pool, then the C heap where glibc allows."""
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


__all__ = ["release_memory"]
