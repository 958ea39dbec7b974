"""Writer output: a local directory, optionally mirrored to a remote through a backend.

Uploads meet a throttling store as downloads do (``retry.call_with_retries``): a refusal
(S3 ``503 SlowDown``, GCS ``429``, Azure ``503 ServerBusy``) uses up no attempt, every PUT of the
process waits for its turn at one pace (``UPLOAD_PACER``, AIMD as in ``pacing``; apart from the
downloads', since stores budget writes and reads apart), each refused PUT waits its backoff
(never shorter than a ``Retry-After``), and an upload fails on refusals alone only once the store
has refused it for ``throttle_limit`` seconds in a row.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from streaming.storage.errors import UploadError
from streaming.storage.pacing import Pacer
from streaming.storage.registry import get_backend, is_remote_url
from streaming.storage.retry import RetriesExhausted, RetryPolicy, call_with_retries, describe
from streaming.storage.secrets import redact

__all__ = ['UPLOAD_PACER', 'Uploader', 'upload_file']

# The pace of this process's uploads under throttling (every uploader thread takes turns here).
UPLOAD_PACER = Pacer()
# Seconds a store may refuse every attempt of one upload before it fails.
THROTTLE_LIMIT = 60.0
if hasattr(os, 'register_at_fork'):  # A forked child must not wait on a parent thread's lock.
    os.register_at_fork(after_in_child=UPLOAD_PACER.reset)


def _join(url: str, basename: str) -> str:
    return url.rstrip('/') + '/' + basename if is_remote_url(url) else os.path.join(url, basename)


def upload_file(local_path: str, url: str, retries: int = 2, backoff: float | None = None,
                throttle_limit: float = THROTTLE_LIMIT) -> None:
    """Send ``local_path`` to ``url``, retrying with the shared policy (``retry.RetryPolicy``).

    ``retries`` extra attempts follow a failed one, with exponential backoff and jitter starting
    at ``backoff`` seconds (default ``STREAMING_DOWNLOAD_BACKOFF``) and honouring
    ``Retry-After``; the final ``UploadError`` names the URL and the cause. Errors another
    attempt cannot fix (missing file, denied access, ...) are raised at once. A throttling
    store's refusal is not a failed attempt: the PUT is paced (``UPLOAD_PACER``) and sent again
    until the store has refused it for ``throttle_limit`` seconds in a row.
    """
    if throttle_limit <= 0:
        raise ValueError(f'throttle_limit must be > 0 seconds, got {throttle_limit}.')
    policy = RetryPolicy.from_env()
    if backoff is not None:
        policy = RetryPolicy(backoff, policy.backoff_max)
    backend = get_backend(url)
    try:
        call_with_retries(lambda: backend.upload(local_path, url), retries=retries,
                          policy=policy, what=f'Upload of {local_path} to {url}',
                          pacer=UPLOAD_PACER, throttle_limit=throttle_limit)
    except RetriesExhausted as failed:
        raise UploadError(f'Uploading {local_path} to {redact(url)} failed after '
                          f'{failed.attempts} attempt(s){failed.why}; last error: '
                          f'{describe(failed.last)}') from failed.last


class Uploader:
    """Resolves a writer's ``out`` and moves finished files to the remote.

    ``out`` is a local directory, a remote URL (files are staged in a temporary directory), or a
    ``(local, remote)`` pair. Without a remote, files simply stay in the local directory. A
    non-empty local directory is an error unless ``exist_ok`` (then it is emptied first) or
    ``keep_contents`` (then it is used as is, as ``merge_index`` does). ``upload_file`` is
    thread-safe (writers call it from their worker pool); ``upload_files`` sends many files with
    ``max_workers`` threads. ``progress_bar`` shows a tqdm bar of uploaded files.
    ``throttle_limit``: seconds a throttling store may refuse every attempt of one file.
    """

    def __init__(self, out: str | Sequence[str], keep_local: bool = False, retry: int = 2,
                 exist_ok: bool = False, keep_contents: bool = False, *,
                 progress_bar: bool = False, max_workers: int | None = None,
                 throttle_limit: float = THROTTLE_LIMIT) -> None:
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
                             f'pair of strings, got {redact(out)!r}.')
        if retry < 0:
            raise ValueError(f'retry must be a non-negative number of retries, got {retry}.')
        self.local = local
        self.remote = remote
        self.keep_local = keep_local or remote is None
        self.retry = retry
        self.throttle_limit = throttle_limit
        self.max_workers = max_workers or min(8, 2 * (os.cpu_count() or 1))
        if os.path.isdir(local) and os.listdir(local) and not keep_contents:
            if not exist_ok:
                raise FileExistsError(f'Output directory {local} is not empty; pass exist_ok=True '
                                      f'to overwrite it.')
            shutil.rmtree(local)
        os.makedirs(local, exist_ok=True)
        self.backend = get_backend(remote) if remote is not None else None
        check_credentials = getattr(self.backend, 'check_credentials', None)
        if check_credentials is not None:
            check_credentials()
        self._progress: Any = None
        self._lock = threading.Lock()
        if progress_bar and self.backend is not None:
            from tqdm import tqdm
            self._progress = tqdm(desc=f'Uploading to {redact(remote)}', unit='file',
                                  leave=False)

    def __repr__(self) -> str:
        return f'Uploader(local={self.local!r}, remote={redact(self.remote)!r})'

    def upload_file(self, basename: str) -> None:
        """Send ``local/basename`` to ``remote/basename``; drop the local copy unless kept."""
        if self.backend is None:
            return
        path = os.path.join(self.local, basename)
        upload_file(path, _join(self.remote, basename), self.retry,  # type: ignore[arg-type]
                    throttle_limit=self.throttle_limit)
        if not self.keep_local:
            os.remove(path)
        if self._progress is not None:
            with self._lock:
                self._progress.update(1)

    def upload_files(self, basenames: Sequence[str]) -> None:
        """Upload several files in parallel (``max_workers`` threads); the first error wins."""
        if self.backend is None or not basenames:
            return
        with ThreadPoolExecutor(max_workers=self.max_workers,
                                thread_name_prefix='uploader') as pool:
            for future in [pool.submit(self.upload_file, name) for name in basenames]:
                future.result()

    def finish(self) -> None:
        """Remove the local staging directory if it was only a staging area."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self.backend is not None and not self.keep_local:
            shutil.rmtree(self.local, ignore_errors=True)
