"""A real OpenSSH server on loopback for the sftp:// tests (``scripts/sshd.sh`` installs it)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from typing import Iterator

import pytest

SSHD = '/usr/sbin/sshd'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _keygen(path: str) -> None:
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', path], check=True)


def start_sshd(root: str) -> Iterator[dict[str, str]]:
    """Start sshd with a throw-away host key, accepting one client key; yield its details."""
    if not os.path.exists(SSHD) or shutil.which('ssh-keygen') is None:
        message = 'sshd not installed: run scripts/sshd.sh (apt-get install openssh-server)'
        if os.environ.get('STREAMING_REQUIRE_SSHD') == '1':
            pytest.fail(message)
        pytest.skip(message)
    os.makedirs(root, exist_ok=True)
    host_key, client_key = os.path.join(root, 'host_key'), os.path.join(root, 'client_key')
    _keygen(host_key)
    _keygen(client_key)
    authorized = os.path.join(root, 'authorized_keys')
    shutil.copy(client_key + '.pub', authorized)
    os.chmod(authorized, 0o600)
    os.makedirs('/run/sshd', exist_ok=True)  # sshd's privilege-separation directory.
    port = _free_port()
    config = os.path.join(root, 'sshd_config')
    with open(config, 'w') as f:
        f.write(f'Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n'
                f'AuthorizedKeysFile {authorized}\nPasswordAuthentication no\n'
                f'KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n'
                f'PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n'
                f'PidFile {root}/sshd.pid\nSubsystem sftp internal-sftp\n'
                f'LogLevel ERROR\nMaxStartups 50\nMaxSessions 50\n')
    proc = subprocess.Popen([SSHD, '-D', '-e', '-f', config], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    known_hosts = os.path.join(root, 'known_hosts')
    with open(host_key + '.pub') as f:
        kind, key = f.read().split()[:2]
    with open(known_hosts, 'w') as f:
        f.write(f'[127.0.0.1]:{port} {kind} {key}\n')
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(('127.0.0.1', port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f'sshd did not start: {proc.stderr.read().decode()[-2000:]}') \
                    from None
            time.sleep(0.05)
    try:
        yield {'port': str(port), 'user': getpass.getuser(), 'key': client_key,
               'known_hosts': known_hosts}
    finally:
        proc.terminate()
        proc.wait(10)
