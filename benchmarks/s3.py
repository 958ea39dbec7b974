"""A local S3 for the remote case: moto's server on loopback, in its own process.

The server runs in a separate process (not a thread of the reading process) so that serving
requests does not compete with the reader for its GIL. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from types import TracebackType

CREDENTIALS = {'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing',
               'AWS_DEFAULT_REGION': 'us-east-1'}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A server subprocess, stopped (terminate, then kill) on ``close`` or leaving ``with``."""

    _process: subprocess.Popen | None = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


class MotoServer(ServerProcess):
    """``with MotoServer() as s3: s3.upload_dir(...)``; ``s3.endpoint`` is the URL to use."""

    def __init__(self, bucket: str = 'bench') -> None:
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f'http://127.0.0.1:{self.port}'
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> MotoServer:
        self._process = subprocess.Popen(
            [sys.executable, '-m', 'moto.server', '-H', '127.0.0.1', '-p', str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(('127.0.0.1', self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.close()
                    raise RuntimeError('moto server did not start') from None
                time.sleep(0.1)
        self.client().create_bucket(Bucket=self.bucket)
        return self

    def client(self):  # noqa: ANN201 - boto3 clients have no importable type
        return s3_client(self.endpoint)

    def upload_dir(self, directory: str, prefix: str) -> int:
        """Upload every file of ``directory`` under ``prefix``; returns the bytes uploaded."""
        return upload_dir(self.client(), self.bucket, directory, prefix)


def s3_client(endpoint: str):  # noqa: ANN201 - boto3 clients have no importable type
    """A boto3 S3 client for a local test server at ``endpoint``."""
    import boto3
    return boto3.client('s3', endpoint_url=endpoint, region_name='us-east-1',
                        aws_access_key_id='testing', aws_secret_access_key='testing')


def upload_dir(client, bucket: str, directory: str, prefix: str) -> int:  # noqa: ANN001
    """Upload every file of ``directory`` under ``prefix``; returns the bytes uploaded."""
    total = 0
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            client.upload_file(path, bucket, f'{prefix}/{name}')
            total += os.path.getsize(path)
    return total
