"""How the suite itself runs (docs/testing.md): one thread per test process, so that the workers
of `make test` (one per core) do not spin their thread pools against each other."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_every_thread_pool_of_a_test_process_has_one_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy as np

    np.ones((64, 64)) @ np.ones((64, 64))  # the BLAS pool is loaded
    pools = threadpoolctl.threadpool_info()
    assert pools and all(p["num_threads"] == 1 for p in pools), pools
    torch = pytest.importorskip("torch")
    assert torch.get_num_threads() == 1


def test_a_process_a_test_starts_inherits_one_thread():
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "1"
