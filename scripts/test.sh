#!/usr/bin/env bash
# Run the test suite: the one test command of this project (CI runs exactly this script).
#
#   bash scripts/test.sh [extra pytest args]
#
# Expects the env made by scripts/setup.sh (override with VENV=...). Tests run in two processes
# (pytest-xdist), so every test must be safe to run in parallel with the others. Scheduling is
# xdist's ``loadgroup``: the tests of a module with a module-scoped fixture (an oracle run, a
# multi-process job, a written dataset) stay on one worker, so that fixture is computed once
# (tests/conftest.py groups them, and puts the longest modules first).
#
# Interop tests compare against the reference (mosaicml-streaming 0.13.0) in its own env. They
# are skipped unless STREAMING_REFERENCE_PYTHON points at that env's python, e.g.
#   STREAMING_REFERENCE_PYTHON=$(bash scripts/reference_env.sh) bash scripts/test.sh
# With STREAMING_REQUIRE_REFERENCE=1 (set by CI) they fail instead of skipping.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${VENV:-.venv}/bin/python
if [ ! -x "$PY" ]; then
  echo "test.sh: $PY not found; run 'bash scripts/setup.sh' first." >&2
  exit 2
fi

# Bytecode: the suite starts hundreds of interpreters that import torch. With
# PYTHONDONTWRITEBYTECODE set (as in some shells and containers) and a venv installed with
# pip's --no-compile (scripts/setup.sh), each of them compiled torch's sources again: ~4 s of CPU
# per `import torch` instead of ~1.7 s. The test run writes its bytecode anyway, but under
# .venv/pycache (PYTHONPYCACHEPREFIX), never into the source tree or site-packages.
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  unset PYTHONDONTWRITEBYTECODE
  PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-$(cd "${VENV:-.venv}" && pwd)/pycache}
  export PYTHONPYCACHEPREFIX
fi

status=0
# The 25 slowest test phases are listed at the end of every run (CI logs keep the profile).
"$PY" -m pytest -n 2 --dist loadgroup --no-loadscope-reorder -q --durations=25 "$@" || status=$?
if [ "$status" -eq 5 ]; then
  # pytest's "no tests were collected": never let an empty run pass.
  echo "test.sh: pytest collected no tests; treating this as a failure." >&2
  exit 1
fi
exit "$status"
