#!/usr/bin/env bash
# Build (or reuse) the venv in which benchmarks/transport_bench.py compares S3 read clients:
# the project's venv (seen through a .pth file, so torch, boto3, moto are the project's own)
# plus the candidates, which the project itself does not depend on. Prints the env's python.
#
#   scripts/transport_env.sh [DEST]     (default: ~/.cache/shardflow/transport)
#
# Only the clients are installed: s3torchconnectorclient (the Rust/CRT client under
# s3torchconnector; no dependencies, so pip never touches torch), obstore, awscrt.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BASE=${STREAMING_VENV:-$REPO/.venv}
DEST=${1:-$HOME/.cache/shardflow/transport}
REQS="obstore==0.12.1 awscrt==0.38.0 s3torchconnectorclient==1.5.0"
STAMP="$DEST/.shardflow-stamp"
mkdir -p "$(dirname "$DEST")"
exec 9>"$DEST.lock"
flock 9
if [ -x "$DEST/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$REQS $BASE" ]; then
  echo "$DEST/bin/python"
  exit 0
fi
rm -rf "$DEST"
"$BASE/bin/python" -m venv "$DEST" >&2
SITE=$("$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
OWN=$("$DEST/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$SITE" > "$OWN/project-venv.pth"
"$DEST/bin/pip" install -q --disable-pip-version-check --no-deps $REQS >&2
"$DEST/bin/python" -c 'import obstore, awscrt.s3, s3torchconnectorclient, torch, boto3' >&2
echo "$REQS $BASE" > "$STAMP"
echo "$DEST/bin/python"
