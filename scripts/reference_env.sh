#!/usr/bin/env bash
# Build (or reuse) the virtual env of the reference, mosaicml-streaming 0.13.0, used as a
# black-box oracle by the interop tests and the benchmarks. Prints the env's python path.
#
#   scripts/reference_env.sh [DEST]     (default: ~/.cache/shardflow/reference-0.13.0)
#
# torch==2.13.0 goes in first so that pip takes the CPU wheel from this machine's disk and never
# a CUDA build. torchvision is pinned to 0.28.0, the release built for torch 2.13.0; it cannot be
# imported on a CPU-only machine, so our driver (tests/oracle/ref_driver.py) puts a stand-in
# module in its place: the reference's format and dataset code never calls torchvision.
# The env is reused only if its stamp matches the exact requirement list below.
set -euo pipefail
DEST=${1:-${STREAMING_REFERENCE_ENV:-$HOME/.cache/shardflow/reference-0.13.0}}
REQS="torch==2.13.0 mosaicml-streaming==0.13.0 torchvision==0.28.0 pillow"
STAMP="$DEST/.shardflow-stamp"
# Concurrent callers (parallel CI steps, a benchmark and a test run) wait for one builder.
mkdir -p "$(dirname "$DEST")"
exec 9>"$DEST.lock"
flock 9
if [ -x "$DEST/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$REQS" ] \
    && "$DEST/bin/python" -c "import importlib.metadata as m; assert m.version('mosaicml-streaming') == '0.13.0'" 2>/dev/null; then
  echo "$DEST/bin/python"
  exit 0
fi
rm -rf "$DEST"
python3 -m venv "$DEST" >&2
"$DEST/bin/pip" install -q --disable-pip-version-check torch==2.13.0 >&2
"$DEST/bin/pip" install -q --disable-pip-version-check $REQS >&2
"$DEST/bin/python" - >&2 <<'PY'
import torch
assert torch.__version__.startswith('2.13.0') and not torch.cuda.is_available(), torch.__version__
PY
echo "$REQS" > "$STAMP"
echo "$DEST/bin/python"
