#!/usr/bin/env bash
# Install OpenSSH's server (Debian: openssh-server) for the sftp:// tests, which start their own
# sshd on loopback with a throw-away host key and config; print the path of the sshd binary.
#
#   SSHD=$(bash scripts/sshd.sh)
#
# Nothing is started or enabled system-wide. Needs root (or sudo) for apt-get the first time.
set -euo pipefail

SSHD=/usr/sbin/sshd
if [ ! -x "$SSHD" ]; then
  echo "sshd.sh: installing openssh-server" >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    openssh-server >&2 || { $SUDO apt-get update >&2 && $SUDO env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends openssh-server >&2; }
  # The package may start a system sshd; the tests never use it.
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now ssh >/dev/null 2>&1 || true; fi
fi
"$SSHD" -V 2>/dev/null || true
echo "$SSHD"
