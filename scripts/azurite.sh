#!/usr/bin/env bash
# Install Azurite (the Azure Storage emulator, an npm package) for the storage tests, cached
# under ~/.cache/shardflow/azurite, and print the path of its azurite-blob launcher.
#
#   AZURITE_BLOB=$(bash scripts/azurite.sh)
#
# Re-running is cheap: a stamp file records the installed version. Needs node and npm
# (Debian: apt-get install nodejs npm); without them it prints nothing and exits 1.
set -euo pipefail

VERSION=${AZURITE_VERSION:-3.35.0}
DIR=${AZURITE_DIR:-$HOME/.cache/shardflow/azurite}
BIN="$DIR/node_modules/.bin/azurite-blob"

if ! command -v npm >/dev/null 2>&1; then
  echo "azurite.sh: npm not found; install node and npm to run the Azure storage tests." >&2
  exit 1
fi
if [ ! -x "$BIN" ] || [ "$(cat "$DIR/.stamp" 2>/dev/null)" != "$VERSION" ]; then
  echo "azurite.sh: installing azurite@$VERSION into $DIR" >&2
  mkdir -p "$DIR"
  (cd "$DIR" && npm install --no-audit --no-fund --silent --no-save "azurite@$VERSION" >&2)
  echo "$VERSION" > "$DIR/.stamp"
fi
"$BIN" --version >/dev/null
echo "$BIN"
