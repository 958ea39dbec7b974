#!/usr/bin/env bash
# The package as users get it: build the sdist and the wheel, install the wheel (not editable)
# into a clean virtual env, and use it from outside the repository.
#
#   bash scripts/wheel_check.sh
#
# 1. `python -m build` makes the sdist, then the wheel FROM that sdist (so a file missing from
#    the sdist breaks the wheel); both are checked for what they must hold (py.typed, the
#    `streaming` console script, no tests).
# 2. A clean env gets only the wheel (plus torch, see below); from a directory outside the repo
#    it imports `streaming` (from the env's site-packages), runs examples/quickstart.py, and the
#    installed `streaming` command inspects and validates the example's dataset.
# 3. `pip install "shardflow[s3] @ <wheel>"` into that env, `pip check`, and the S3 backend is
#    built from it (scripts/check_extras.sh does the round trip against moto for every extra).
# 4. The public API type-checks: `mypy --strict` on tests/typecheck/public_api.py (a file that
#    uses every name of streaming.__all__) against the installed wheel, i.e. through py.typed
#    as a user's type checker sees it. Errors inside the package itself are not reported (mypy
#    treats installed packages as third-party code); only its public signatures count.
#
# Caches (safe): torch==2.13.0 (CPU) is installed once into a directory under
# ~/.cache/shardflow, shared with scripts/check_extras.sh, and put on the env's path through a
# .pth file (a constraint pins it, so nothing can pull another build); mypy's cache lives under
# ~/.cache/shardflow/mypy (mypy checks every cached module against its file's hash).
#
# Environment knobs:
#   PYTHON      interpreter for the clean env (default: python3)
#   DEV_PYTHON  interpreter with `build` and `mypy` (the dev env; default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH PYTHONHOME

PYTHON=${PYTHON:-python3}
DEV_PYTHON=${DEV_PYTHON:-$ROOT/.venv/bin/python}
TORCH_VERSION=2.13.0
CACHE=${SHARDFLOW_CACHE:-$HOME/.cache/shardflow}
PYTAG=$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
TORCH_DIR="$CACHE/extras-torch-$TORCH_VERSION-cpu-$PYTAG"   # the same as check_extras.sh's
START=$SECONDS
step() { printf 'wheel_check: %s (%ss)\n' "$1" "$((SECONDS - START))"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shardflow-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 1. sdist and wheel, built in a copy of the tree (nothing is written into the repository).
mkdir -p "$WORK/src" "$WORK/dist" "$WORK/run"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 cp --parents -t "$WORK/src" 2>/dev/null || true   # (files deleted but not committed)
BUILD=("$DEV_PYTHON" -m build)
# Without build isolation when the dev env has a setuptools with bdist_wheel built in.
if "$DEV_PYTHON" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 71)' \
    2>/dev/null; then
  BUILD+=(--no-isolation)
fi
"${BUILD[@]}" --outdir "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log" >&2; exit 1; }
SDIST=$(ls "$WORK"/dist/shardflow-*.tar.gz)
WHEEL=$(ls "$WORK"/dist/shardflow-*.whl)
step "built $(basename "$SDIST") and $(basename "$WHEEL") (the wheel from the sdist)"

"$DEV_PYTHON" - "$SDIST" "$WHEEL" <<'PY'
import sys
import tarfile
import zipfile

sdist, wheel = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
must = ['streaming/__init__.py', 'streaming/py.typed', 'streaming/cli/main.py',
        'streaming/base/__init__.py']
missing = [n for n in must if n not in names]
assert not missing, f'{wheel} lacks {missing}'
assert not [n for n in names if n.startswith(('tests/', 'benchmarks/', 'examples/'))], \
    f'{wheel} holds test, benchmark or example files'
entry = next(n for n in names if n.endswith('.dist-info/entry_points.txt'))
scripts = zipfile.ZipFile(wheel).read(entry).decode()
assert 'streaming = streaming.cli.main:main' in scripts, f'{entry}: no streaming command:\n{scripts}'
members = tarfile.open(sdist).getnames()
root = members[0].split('/')[0]
for name in ('pyproject.toml', 'README.md', 'streaming/py.typed', 'streaming/__init__.py'):
    assert f'{root}/{name}' in members, f'{sdist} lacks {name}'
print(f'wheel_check: {len(names)} files in the wheel, {len(members)} in the sdist: contents ok')
PY

# 2. A clean env with the wheel alone (and the shared CPU torch).
echo "torch==$TORCH_VERSION" >"$WORK/constraints.txt"
if [ ! -f "$TORCH_DIR/.complete" ]; then
  step "installing torch==$TORCH_VERSION into $TORCH_DIR (once)"
  rm -rf "$TORCH_DIR"
  "$PYTHON" -m pip install -q --progress-bar off --target "$TORCH_DIR" "torch==$TORCH_VERSION"
  touch "$TORCH_DIR/.complete"
fi
ENV="$WORK/env"
"$PYTHON" -m venv "$ENV"
echo "$TORCH_DIR" >"$("$ENV/bin/python" -c \
  'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_shared_torch.pth"
PIP=("$ENV/bin/python" -m pip install -q --progress-bar off --no-compile -c "$WORK/constraints.txt")
"${PIP[@]}" "$WHEEL"
step "installed the wheel into a clean env"

cd "$WORK/run"   # outside the repository: nothing can come from the source tree
"$ENV/bin/python" -P - "$ENV" <<'PY'
import importlib.metadata as m
import json
import os
import sys

import streaming
import torch

env = os.path.realpath(sys.argv[1])
where = os.path.realpath(streaming.__file__)
assert where.startswith(env + os.sep), f'streaming imported from {where}, not from the env {env}'
direct = m.distribution('shardflow').read_text('direct_url.json')
assert direct is None or not json.loads(direct).get('dir_info', {}).get('editable'), direct
assert os.path.isfile(os.path.join(os.path.dirname(where), 'py.typed')), 'py.typed not installed'
assert torch.__version__ == '2.13.0+cpu' and torch.version.cuda is None, torch.__version__
print(f'wheel_check: import streaming {streaming.__version__} from {os.path.dirname(where)}')
PY
cp "$ROOT/examples/quickstart.py" .
"$ENV/bin/python" -P quickstart.py --samples 2000 --keep "$WORK/qs"
STREAMING=("$ENV/bin/streaming")
"${STREAMING[@]}" --version
"${STREAMING[@]}" inspect "$WORK/qs/remote"
"${STREAMING[@]}" validate "$WORK/qs/remote" --decode
step "example and the streaming command ran from the installed wheel"

# 3. The s3 extra, from the same wheel.
"${PIP[@]}" "shardflow[s3] @ file://$WHEEL"
"$ENV/bin/python" -m pip check
# Built and its URL parsed only: the round trip against moto is check_extras.sh's job, so
# CI's STREAMING_REQUIRE_EMULATORS=1 (no endpoints are passed here) does not apply.
STREAMING_REQUIRE_EMULATORS=0 "$ENV/bin/python" -P "$ROOT/scripts/extras_smoke.py" check s3
step "pip install \"shardflow[s3] @ <wheel>\" works"

# 4. The public API under mypy --strict, through py.typed.
cp "$ROOT/tests/typecheck/public_api.py" .
"$DEV_PYTHON" -m mypy --version
"$DEV_PYTHON" -m mypy --strict --python-executable "$ENV/bin/python" \
  --cache-dir "$CACHE/mypy" public_api.py
step "the public API type-checks (mypy --strict)"
echo "wheel_check: ok"
