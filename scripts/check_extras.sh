#!/usr/bin/env bash
# Each optional extra installs alone and works: for every extra in pyproject.toml (but the
# bundles all / dev / *-test and docs, and spark and text unless asked for), a CLEAN virtual env gets only
# `shardflow[EXTRA]`, resolved against the package index as a user's install would be, then
# scripts/extras_smoke.py uses it for real (a backend's upload / list / download round trip
# against its emulator on loopback; an image column written and read back; ...).
#
#   bash scripts/check_extras.sh              # every extra
#   EXTRAS="oci hf" bash scripts/check_extras.sh
#
# torch: torch==2.13.0 (the CPU build) is installed once into a shared directory under
# ~/.cache/shardflow and put on each env's path through a .pth file, so that pip sees it as
# installed; a constraint pins it, so no install can ever pull another (CUDA) build.
# Caches (safe: files are keyed by their immutable PyPI file names): pip's own HTTP cache does
# not keep files on this network, so every wheel an env installs is kept in
# ~/.cache/shardflow/extras-wheels; each run resolves against the index, fetches only the
# files that wheelhouse lacks, and installs from it. Each env is made afresh on every run.
#
# Environment knobs:
#   PYTHON         interpreter for the clean envs (default: python3)
#   SERVER_PYTHON  interpreter with the emulators (moto, gcp-storage-emulator) for the round
#                  trips (default: .venv/bin/python; without it, backends are only built)
#   AZURITE_BLOB   Azurite's launcher (scripts/azurite.sh prints it), for the azure round trip
#   JOBS           extras checked at the same time (default: 3)
#   CHECK_EXTRAS_OFFLINE=1  resolve against the wheelhouse only (faster; misses new releases)
#   STREAMING_REQUIRE_EMULATORS=1  a missing emulator fails the check instead of downgrading it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH PYTHONHOME

PYTHON=${PYTHON:-python3}
SERVER_PYTHON=${SERVER_PYTHON:-$ROOT/.venv/bin/python}
JOBS=${JOBS:-3}
TORCH_VERSION=2.13.0
CACHE=${SHARDFLOW_CACHE:-$HOME/.cache/shardflow}
WHEELHOUSE="$CACHE/extras-wheels"   # every file the envs installed, by its PyPI file name
TORCH_DIR="$CACHE/extras-torch-$TORCH_VERSION-cpu-$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
START=$SECONDS

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shardflow-extras.XXXXXX")
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    exec 9>&- 2>/dev/null || true   # closing the server's stdin stops it
    for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

EXTRAS=$(EXTRAS=${EXTRAS:-} "$PYTHON" - <<'PY'
import os
import sys
import tomllib
with open('pyproject.toml', 'rb') as f:
    extras = tomllib.load(f)['project']['optional-dependencies']
asked = os.environ['EXTRAS'].split()
unknown = [e for e in asked if e not in extras]
if unknown:
    sys.exit(f'check_extras: no such extra in pyproject.toml: {unknown}; known: {list(extras)}')
if asked:
    print(' '.join(asked))
    sys.exit()
# Bundles of other extras are not checked (their name ends in -test, or all / dev), nor the
# docs tooling; the heavy extras that are no storage extra only when asked for, e.g.
# EXTRAS="spark text" (pyspark unpacks to 450 MB, transformers to thousands of files; the dev
# env's tests cover both).
skip = {'all', 'dev', 'docs', 'spark', 'text'}
print(' '.join(e for e in extras if e not in skip and not e.endswith('-test')))
PY
)
echo "check_extras: extras: $EXTRAS"

# 1. The emulators, for the round trips (one set shared by every extra), started first: they
#    come up while the wheel is built.
ENDPOINTS="$WORK/endpoints.json"
if "$SERVER_PYTHON" -c 'import moto.server, boto3' 2>/dev/null; then
  mkfifo "$WORK/server-stdin"
  "$SERVER_PYTHON" scripts/extras_smoke.py serve "$ENDPOINTS" <"$WORK/server-stdin" \
    >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  disown "$SERVER_PID"   # not one of the jobs `wait -n` counts below
  exec 9>"$WORK/server-stdin"
else
  echo "check_extras: no emulators ($SERVER_PYTHON lacks moto); backends are only built"
fi

# 2. The project's wheel, built once (in a copy of the tree: nothing is written to the repo).
mkdir -p "$WORK/src" "$WORK/dist" "$WHEELHOUSE"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 cp --parents -t "$WORK/src" 2>/dev/null || true   # (files deleted but not committed)
# Without build isolation when the dev env has a recent setuptools (saves fetching it again).
if "$SERVER_PYTHON" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 70)' 2>/dev/null; then
  BUILD=("$SERVER_PYTHON" -m pip wheel --no-build-isolation)
else
  BUILD=("$PYTHON" -m pip wheel)
fi
"${BUILD[@]}" -q --no-deps -w "$WORK/dist" "$WORK/src" 2>&1 | grep -v "^WARNING" || true
WHEEL=$(ls "$WORK"/dist/shardflow-*.whl)
echo "check_extras: built $(basename "$WHEEL") ($((SECONDS - START))s)"

# 3. torch, CPU build, shared by every env (installed once, then reused).
echo "torch==$TORCH_VERSION" > "$WORK/constraints.txt"
if [ ! -f "$TORCH_DIR/.complete" ]; then
  echo "check_extras: installing torch==$TORCH_VERSION into $TORCH_DIR (once)"
  rm -rf "$TORCH_DIR"
  "$PYTHON" -m pip install -q --progress-bar off --target "$TORCH_DIR" "torch==$TORCH_VERSION"
  touch "$TORCH_DIR/.complete"
fi
if ls "$TORCH_DIR" | grep -qi '^nvidia'; then
  echo "check_extras: $TORCH_DIR holds CUDA packages; remove it and re-run" >&2
  exit 1
fi

if [ -n "$SERVER_PID" ]; then
  for _ in $(seq 600); do
    [ -f "$ENDPOINTS" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -f "$ENDPOINTS" ] || { echo "check_extras: emulators did not start" >&2; exit 1; }
  echo "check_extras: emulators: $(cat "$ENDPOINTS") ($((SECONDS - START))s)"
fi

# 4. One clean env per extra, JOBS at a time.
RESOLVE=()
if [ "${CHECK_EXTRAS_OFFLINE:-0}" = 1 ]; then
  # Resolve against the wheelhouse alone: no index traffic, but no check of new releases.
  RESOLVE=(--no-index -f "$WHEELHOUSE")
  echo "check_extras: CHECK_EXTRAS_OFFLINE=1: resolving against $WHEELHOUSE only"
fi
# Each env: resolve against the index (what a user would get), fetch into the wheelhouse
# only the files it lacks, then install that exact set from the wheelhouse alone.
check_one() {
  local extra=$1 env="$WORK/env-$1" log="$WORK/$1.log" begin=$SECONDS status=0
  local pip=("$PYTHON" -m pip --python "$env/bin/python")
  local want="shardflow[$extra] @ file://$WHEEL"
  # One && chain: errexit does not apply inside a command whose status is tested.
  {
    "$PYTHON" -m venv --without-pip "$env" &&
    echo "$TORCH_DIR" >"$("$env/bin/python" -c \
      'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_shared_torch.pth" &&
    "${pip[@]}" install -q --dry-run --report "$WORK/$extra.json" -c "$WORK/constraints.txt" \
      "${RESOLVE[@]}" "$want" &&
    "$PYTHON" - "$WORK/$extra.json" "$WHEELHOUSE" "$WORK/$extra.pins" "$WORK/$extra.fetch" <<'PY' &&
import json, os, sys
from urllib.parse import urlparse
report, wheelhouse, pins, fetch = sys.argv[1:]
have = set(os.listdir(wheelhouse))
with open(report) as f:
    items = json.load(f)['install']
with open(pins, 'w') as p, open(fetch, 'w') as q:
    for item in items:
        name, version = item['metadata']['name'], item['metadata']['version']
        url = item['download_info']['url']
        if name == 'shardflow':
            continue
        p.write(f'{name}=={version}\n')
        filename = os.path.basename(urlparse(url).path)
        wheel = filename.endswith('.whl')
        if (wheel and filename in have) or (not wheel and any(
                h.lower().startswith(f'{name.lower().replace("-", "_")}-{version}-')
                for h in have)):
            continue
        q.write(url + '\n')
PY
    { [ ! -s "$WORK/$extra.fetch" ] || {
        mkdir -p "$WORK/new-$extra" &&
        "$PYTHON" -m pip wheel -q --no-deps -w "$WORK/new-$extra" -r "$WORK/$extra.fetch" &&
        for file in "$WORK/new-$extra"/*; do mv -n "$file" "$WHEELHOUSE/"; done; }; } &&
    "${pip[@]}" install -q --no-compile --no-index -f "$WHEELHOUSE" \
      -c "$WORK/constraints.txt" -c "$WORK/$extra.pins" "$want" &&
    "${pip[@]}" check &&
    # Never a CUDA build: the same CPU torch, and no nvidia packages pulled in.
    "$env/bin/python" -c "import importlib.metadata as m, torch
assert torch.__version__ == '$TORCH_VERSION+cpu' and torch.version.cuda is None, torch.__version__
cuda = [d.metadata['Name'] for d in m.distributions() if d.metadata['Name'].lower().startswith('nvidia')]
assert not cuda, f'CUDA packages installed: {cuda}'" &&
    (cd "$WORK" && "$env/bin/python" -P "$ROOT/scripts/extras_smoke.py" check "$extra" \
      "$ENDPOINTS")
  } >"$log" 2>&1 || status=$?
  printf '%-8s %s in %ss (%s files fetched)\n' "$extra" \
    "$([ $status -eq 0 ] && echo ok || echo FAILED)" "$((SECONDS - begin))" \
    "$(wc -l <"$WORK/$extra.fetch" 2>/dev/null || echo '?')" >"$log.result"
  rm -rf "$env" "$WORK/new-$extra"
  return $status
}

mkdir -p "$WHEELHOUSE"
active=0
for extra in $EXTRAS; do
  if [ "$active" -ge "$JOBS" ]; then wait -n || true; active=$((active - 1)); fi
  check_one "$extra" &
  active=$((active + 1))
done
while [ "$active" -gt 0 ]; do wait -n || true; active=$((active - 1)); done

failed=()
for extra in $EXTRAS; do
  grep -q ' ok in ' "$WORK/$extra.log.result" 2>/dev/null || failed+=("$extra")
done

for extra in $EXTRAS; do
  cat "$WORK/$extra.log.result" 2>/dev/null || echo "$extra: no result"
  if printf '%s\n' "${failed[@]}" | grep -qx "$extra"; then
    echo "---- $extra log ----"; cat "$WORK/$extra.log"; echo "----"
  else
    sed 's/^/    /' "$WORK/$extra.log" | grep -v -e '^    $' -e '^    WARNING' || true
  fi
done
echo "check_extras: $((SECONDS - START))s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "check_extras: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "check_extras: every extra installs alone and works"
