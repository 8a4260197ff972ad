"""The core package imports without torch or the timestamp extra (DESIGN: heavy dependencies are optional extras)."""

from __future__ import annotations

import subprocess
import sys

CORE = ["prereg_kit", "prereg_kit.plan", "prereg_kit.lock", "prereg_kit.verify", "prereg_kit.audit",
        "prereg_kit.runlog", "prereg_kit.readings", "prereg_kit.stats", "prereg_kit.analyze", "prereg_kit.report",
        "prereg_kit.dryrun", "prereg_kit.synth", "prereg_kit.cli", "prereg_kit.timestamp"]


def test_core_imports_without_torch():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'vllm',\n"
        "                                   'rfc3161_client', 'asn1crypto', 'cryptography'):\n"
        "            raise ImportError(f'{name} is blocked in this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for m in {CORE!r}:\n"
        "    __import__(m)\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
