"""Writer output: a local directory, optionally mirrored to a remote through a backend."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Sequence

from streaming.storage.registry import get_backend, is_remote_url
from streaming.util import retry as retry_decorator

__all__ = ['Uploader']


def _join(url: str, basename: str) -> str:
    return url.rstrip('/') + '/' + basename if is_remote_url(url) else os.path.join(url, basename)


class Uploader:
    """Resolves a writer's ``out`` and moves finished files to the remote.

    ``out`` is a local directory, a remote URL (files are staged in a temporary directory), or a
    ``(local, remote)`` pair. Without a remote, files simply stay in the local directory. A
    non-empty local directory is an error unless ``exist_ok`` (then it is emptied first) or
    ``keep_contents`` (then it is used as is, as ``merge_index`` does).
    """

    def __init__(self, out: str | Sequence[str], keep_local: bool = False, retry: int = 2,
                 exist_ok: bool = False, keep_contents: bool = False) -> None:
        if isinstance(out, str):
            if is_remote_url(out):
                local, remote = tempfile.mkdtemp(prefix='streaming-out-'), out
            else:
                local, remote = out, None
        elif isinstance(out, (tuple, list)) and len(out) == 2 and \
                all(isinstance(x, str) for x in out):
            local, remote = out
        else:
            raise ValueError(f'out must be a local directory, a remote URL or a (local, remote) '
                             f'pair of strings, got {out!r}.')
        if retry < 0:
            raise ValueError(f'retry must be a non-negative number of retries, got {retry}.')
        self.local = local
        self.remote = remote
        self.keep_local = keep_local or remote is None
        self.attempts = retry + 1
        if os.path.isdir(local) and os.listdir(local) and not keep_contents:
            if not exist_ok:
                raise FileExistsError(f'Output directory {local} is not empty; pass exist_ok=True '
                                      f'to overwrite it.')
            shutil.rmtree(local)
        os.makedirs(local, exist_ok=True)
        self.backend = get_backend(remote) if remote is not None else None

    def upload_file(self, basename: str) -> None:
        """Send ``local/basename`` to ``remote/basename``; drop the local copy unless kept."""
        if self.backend is None:
            return
        path = os.path.join(self.local, basename)
        upload = retry_decorator(Exception, num_attempts=self.attempts, initial_backoff=0.5)(
            self.backend.upload)
        upload(path, _join(self.remote, basename))
        if not self.keep_local:
            os.remove(path)

    def finish(self) -> None:
        """Remove the local staging directory if it was only a staging area."""
        if self.backend is not None and not self.keep_local:
            shutil.rmtree(self.local, ignore_errors=True)
