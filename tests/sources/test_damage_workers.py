"""Bit rot under an unchanged size and mtime, read through DataLoader workers: a clear error.

The file keeps its size and mtime, so re-listing trusts the index; only the read-time checks
(the tar walked again, each JSON line parsed) can catch it, inside a worker process. The error
must reach the training loop as the ``SourceFileError`` naming the file and the member or line,
never a worker dying without a message or a short epoch.
"""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError


def _rot(path: str, at: int, data: bytes) -> None:
    """Overwrite bytes at ``at`` keeping the file's size and mtime (silent disk corruption)."""
    st = os.stat(path)
    with open(path, 'r+b') as f:
        f.seek(at)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _tars(root: str) -> tuple[str, int, bytes, str]:
    """(file, where to damage it, the bytes put there, the error expected)."""
    from tests.sources.test_webdataset import write_tars
    path = write_tars(root, tars=2, per_tar=30)[1]
    with open(path, 'rb') as f:
        members = tarfile.open(fileobj=io.BytesIO(f.read())).getmembers()
    at = members[len(members) // 2].offset
    return path, at, os.urandom(512), rf'shard-00001\.tar.*member \d+, header at byte {at}'


def _jsonl(root: str) -> tuple[str, int, bytes, str]:
    from tests.sources.test_jsonl import write_jsonl
    write_jsonl(root, files=2, rows=60)
    path = os.path.join(root, 'part-001.jsonl')
    with open(path, 'rb') as f:
        data = f.read()
    at = [i for i, byte in enumerate(data) if byte == 10][29] + 3  # Inside line 31.
    return path, at, b'\xff', r'part-001\.jsonl, line 31: not valid UTF-8'


@pytest.mark.parametrize('write', [_tars, _jsonl], ids=['webdataset', 'jsonl'])
def test_bit_rot_read_in_workers_is_a_named_error(tmp_path, write) -> None:
    root, cache = str(tmp_path / 'data'), str(tmp_path / 'cache')
    path, at, garbage, message = write(root)
    SourceStream(remote=root, local=cache).get_index(fetch=True)  # Indexed while intact.
    _rot(path, at, garbage)
    dataset = StreamingDataset(streams=[SourceStream(remote=root, local=cache)], batch_size=4,
                               shuffle=True)
    assert dataset.num_samples == (60 if write is _tars else 120)  # The index is trusted.
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=2)
    with pytest.raises(SourceFileError, match=message):
        for _ in loader:
            pass
