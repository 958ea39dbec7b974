#!/usr/bin/env bash
# Create the project's virtual env (.venv) and install the library in it, editable, with the
# development extras (pytest, pytest-xdist, hypothesis, ruff, pillow).
#
#   bash scripts/setup.sh
#
# Environment knobs:
#   PYTHON   interpreter used to create the env (default: python3)
#   VENV     where the env goes (default: .venv in the repository root)
#
# torch is installed first, pinned, so that the later `pip install -e .[dev]` finds its torch
# requirement already satisfied and never pulls a different (CUDA) build. Re-running the script
# is cheap: pip skips whatever is already installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_REQ="torch==2.13.0"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

echo "setup: creating $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)

echo "setup: installing $TORCH_REQ (CPU build)"
"${PIP[@]}" install -q --progress-bar off "$TORCH_REQ"

echo "setup: installing shardflow (editable) with the dev extras"
"${PIP[@]}" install -q --progress-bar off -e '.[dev]'

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
