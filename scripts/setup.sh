#!/usr/bin/env bash
# Create the project's virtual env (.venv) and install the library in it, editable.
#
#   bash scripts/setup.sh          # core + torch: what examples/quickstart.py needs
#   bash scripts/setup.sh --dev    # also the dev extras: test tools, emulators, Spark, docs...
#
# Environment knobs:
#   PYTHON   interpreter used to create the env (default: python3)
#   VENV     where the env goes (default: .venv in the repository root)
#
# torch is installed first, pinned, so that the later `pip install -e .` finds its torch
# requirement already satisfied and never pulls a different (CUDA) build. Re-running the script
# is cheap: pip skips whatever is already installed, and `--dev` after a plain run only adds
# the extras.
#
# Speed (the README's first command must stay well under 90 s on a fresh machine): pip runs
# with --no-compile (byte-compiling all of torch took ~45 s of a 68 s install; Python compiles
# the modules a program imports on first import instead, ~7 s for torch), and the editable
# build reuses the setuptools that torch brings along instead of fetching one into an
# isolated build env.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=.
case "${1:-}" in
  "") ;;
  --dev) TARGET='.[dev]' ;;
  -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup.sh: unknown argument '$1' (expected nothing or --dev)" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_REQ="torch==2.13.0"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

echo "setup: creating $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --progress-bar off --no-compile)
START=$SECONDS

echo "setup: installing $TORCH_REQ (CPU build)"
"${PIP[@]}" "$TORCH_REQ"

BUILD=()
if "$VENV/bin/python" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 71)' \
    2>/dev/null; then
  BUILD=(--no-build-isolation)
fi

echo "setup: installing shardflow (editable)$([ "$TARGET" = . ] || echo ' with the dev extras')"
# torch pinned again in the same command: no extra may replace it.
"${PIP[@]}" "${BUILD[@]}" "$TORCH_REQ" -e "$TARGET"

# Fail loudly if anything replaced torch by another version or by a CUDA build.
"$VENV/bin/python" - <<'PY'
import torch
version = torch.__version__
assert version.split('+')[0] == '2.13.0', f'expected torch 2.13.0, found {version}'
assert torch.version.cuda is None, f'expected the CPU build of torch, found CUDA {torch.version.cuda}'
import streaming
print(f'setup: ok (torch {version}, streaming {streaming.__version__} from '
      f'{streaming.__file__.rsplit("/", 2)[0]})')
PY
echo "setup: done in $((SECONDS - START))s"
