#!/usr/bin/env bash
# Build the documentation site strictly (a broken link, anchor or API reference fails the build)
# into build/site. Needs the docs extra: pip install -e ".[docs]". Python: $PYTHON, else the
# checkout's .venv, else python3 on PATH.
#   bash scripts/docs.sh            # build
#   bash scripts/docs.sh serve      # live preview on http://127.0.0.1:8000
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if [ -z "${PYTHON:-}" ] && [ ! -x "$PY" ]; then
  PY=python3  # no .venv in this checkout (e.g. a git worktree): the Python on PATH
fi
if [ "${1:-build}" = serve ]; then
  NO_MKDOCS_2_WARNING=1 exec "$PY" -m mkdocs serve
fi
NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --clean "$@"
echo "docs built in build/site"
