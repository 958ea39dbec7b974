"""``sftp://[USER[:PASSWORD]@]HOST[:PORT]/PATH``: files on an SSH server, through paramiko.

Authentication, in order: the password in the URL; the private key file named by
``COMPOSER_SFTP_KEY_FILE`` (as in the reference; ``SFTP_KEY_FILE`` also works); the SSH agent
and the usual ``~/.ssh`` keys. The server's host key must be known: it is checked against
``~/.ssh/known_hosts`` and the file named by ``COMPOSER_SFTP_KNOWN_HOSTS_FILE`` (or
``SFTP_KNOWN_HOSTS_FILE``); an unknown host is refused. ``PATH`` is absolute on the server
(``sftp://host/data/x`` is ``/data/x``).

One connection per (user, host, port) and thread is kept open and reused. Reads are ranged (seek
then read), so downloads get the shared layer's parallel ranges, resume and checksums; uploads
write a temporary name beside the target and rename it.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as stat_module
import threading
import uuid
from typing import Any
from urllib.parse import unquote, urlparse

import paramiko

from streaming.storage.backend import Backend
from streaming.storage.chunks import handle_chunks
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.secrets import redact

__all__ = ['SFTPBackend', 'parse_sftp_url']

def parse_sftp_url(url: str) -> tuple[str, int, str | None, str | None, str]:
    """``sftp://user:pw@host:port/path`` -> (host, port, user, password, path)."""
    parsed = urlparse(url)
    if parsed.scheme != 'sftp' or not parsed.hostname:
        raise ValueError(f'URL {redact(url)!r}: expected sftp://[USER[:PASSWORD]@]HOST[:PORT]/PATH.')
    path = unquote(parsed.path) or '/'
    user = unquote(parsed.username) if parsed.username else None
    password = unquote(parsed.password) if parsed.password else None
    return parsed.hostname, parsed.port or 22, user, password, path


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _translate(url: str, error: BaseException) -> BaseException:
    """Builtin exception types for what callers handle: missing, denied, or worth a retry."""
    code = getattr(error, 'errno', None)
    if code == errno.ENOENT or isinstance(error, FileNotFoundError):
        return FileNotFoundError(f'{redact(url)}: no such file on the server.')
    if code == errno.EACCES or isinstance(error, PermissionError):
        return PermissionError(f'{redact(url)}: permission denied by the server.')
    if isinstance(error, paramiko.AuthenticationException):
        return PermissionError(f'{redact(url)}: SSH authentication failed ({error}); set '
                               f'COMPOSER_SFTP_KEY_FILE or put a password in the URL.')
    if isinstance(error, paramiko.SSHException) and 'not found in known_hosts' in str(error):
        return PermissionError(f'{redact(url)}: unknown host key ({error}); add the host to '
                               f'~/.ssh/known_hosts or COMPOSER_SFTP_KNOWN_HOSTS_FILE.')
    return TransientError(f'{redact(url)}: {type(error).__name__}: {error}')


class SFTPBackend(Backend):
    """SSH File Transfer Protocol servers."""

    scheme = 'sftp'

    def __init__(self) -> None:
        self._local = threading.local()

    def _client(self, url: str, timeout: float) -> tuple[paramiko.SFTPClient, str]:
        host, port, user, password, path = parse_sftp_url(url)
        key = (user, host, port)
        clients: dict[Any, tuple[paramiko.SSHClient, paramiko.SFTPClient]] = \
            self._local.__dict__.setdefault('clients', {})
        entry = clients.get(key)
        if entry is not None:
            transport = entry[0].get_transport()
            if transport is not None and transport.is_active():
                entry[1].get_channel().settimeout(timeout)
                return entry[1], path
            entry[0].close()
        ssh = paramiko.SSHClient()
        ssh.load_system_host_keys()
        known = _env('COMPOSER_SFTP_KNOWN_HOSTS_FILE', 'SFTP_KNOWN_HOSTS_FILE')
        if known:
            ssh.load_host_keys(known)
        ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
        key_file = _env('COMPOSER_SFTP_KEY_FILE', 'SFTP_KEY_FILE')
        ssh.connect(host, port=port, username=user, password=password, key_filename=key_file,
                    timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                    look_for_keys=key_file is None and password is None,
                    allow_agent=key_file is None and password is None)
        sftp = ssh.open_sftp()
        sftp.get_channel().settimeout(timeout)
        clients[key] = (ssh, sftp)
        return sftp, path

    def _call(self, url: str, timeout: float, op: Any) -> Any:
        try:
            sftp, path = self._client(url, timeout)
            return op(sftp, path)
        except (OSError, paramiko.SSHException, EOFError) as error:
            raise _translate(url, error) from error

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        attrs = self._call(url, timeout, lambda sftp, path: sftp.stat(path))
        if stat_module.S_ISDIR(attrs.st_mode or 0):
            raise FileNotFoundError(f'{redact(url)} is a directory, not a file.')
        return ObjectInfo(attrs.st_size, f'{attrs.st_mtime}-{attrs.st_size}')

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        info = self.stat(url, timeout=timeout)
        if etag is not None and etag != info.etag:
            raise FileNotFoundError(f'{redact(url)} changed during the download.')

        def open_at(sftp: paramiko.SFTPClient, path: str) -> Any:
            handle = sftp.open(path, 'rb')
            handle.seek(start)
            return handle

        handle = self._call(url, timeout, open_at)
        return Response(info, handle_chunks(handle, start, end,
                                            (OSError, paramiko.SSHException, EOFError),
                                            lambda error: _translate(url, error)))

    def upload(self, local_path: str, url: str) -> None:
        def put(sftp: paramiko.SFTPClient, path: str) -> None:
            _makedirs(sftp, posixpath.dirname(path))
            temp = f'{path}.{uuid.uuid4().hex[:8]}.tmp'
            try:
                sftp.put(local_path, temp)
                sftp.posix_rename(temp, path)
            except BaseException:
                try:
                    sftp.remove(temp)
                except OSError:
                    pass
                raise

        self._call(url, 60.0, put)

    def list(self, url: str) -> list[str]:
        parsed = urlparse(url)
        prefix = f'{parsed.scheme}://{parsed.netloc}'

        def walk(sftp: paramiko.SFTPClient, path: str) -> list[str]:
            try:
                entries = sftp.listdir_attr(path)
            except OSError as error:
                if getattr(error, 'errno', None) == errno.ENOENT:
                    return []
                raise
            found = []
            for entry in entries:
                child = posixpath.join(path, entry.filename)
                if stat_module.S_ISDIR(entry.st_mode or 0):
                    found += walk(sftp, child)
                else:
                    found.append(child)
            return found

        def list_root(sftp: paramiko.SFTPClient, path: str) -> list[str]:
            try:
                if not stat_module.S_ISDIR(sftp.stat(path).st_mode or 0):
                    return [path]
            except OSError as error:
                if getattr(error, 'errno', None) != errno.ENOENT:
                    raise
                return []
            return walk(sftp, path)

        return sorted(prefix + path for path in self._call(url, 60.0, list_root))


def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    if path in ('', '/'):
        return
    try:
        if stat_module.S_ISDIR(sftp.stat(path).st_mode or 0):
            return
    except OSError:
        pass
    _makedirs(sftp, posixpath.dirname(path))
    try:
        sftp.mkdir(path)
    except OSError:
        if not stat_module.S_ISDIR(sftp.stat(path).st_mode or 0):
            raise
