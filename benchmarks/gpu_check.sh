#!/usr/bin/env bash
# The GPU path check (docs/performance.md, "The GPU path"): benchmarks/gpu_check.py on one GPU
# under a time limit, its output kept in a log beside the JSON summary.
#
#   bash benchmarks/gpu_check.sh [extra gpu_check.py options]
#
# GPU_CHECK_DIR (default ./gpu-check) receives gpu_check.log and gpu_check.json;
# GPU_CHECK_TIMEOUT (seconds, default 480: the 8-minute budget) stops a run that hangs;
# PYTHON (default python3). Exit status: gpu_check.py's (0 all checks passed, 1 a check
# failed), 124 on timeout, 3 when a package the trainer needs is missing.
set -u -o pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${GPU_CHECK_DIR:-gpu-check}"
py="${PYTHON:-python3}"
mkdir -p "$dir"
log="$dir/gpu_check.log"
missing=$("$py" - <<'PY'
import importlib.util
need = ["torch", "transformers", "tokenizers", "numpy", "pandas", "pyarrow", "filelock", "jinja2", "pydantic"]  # what the check imports
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
    echo "gpu_check: missing Python packages: $missing (carry them as wheels; docs/performance.md, 'The GPU path')" | tee "$log"
    exit 3
fi
export PYTHONUNBUFFERED=1
timeout --kill-after=15 "${GPU_CHECK_TIMEOUT:-480}" "$py" "$here/gpu_check.py" --out "$dir/gpu_check.json" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "gpu_check: exit $rc; log $log, summary $dir/gpu_check.json" | tee -a "$log"
exit "$rc"
