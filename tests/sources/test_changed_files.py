"""A source file that changes is detected, never half-read: every in-place format, local and S3.

The promise (docs/sources/README.md, "A file that changes"): a stream built with
``refresh=True`` indexes the files as they are at its start; a file that differs from the index
later (size, mtime or ETag) fails the read of its units with ``StaleSourceError`` naming it,
and a file that changes while it is being read (indexed, fetched, or decoded in place) too.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import pytest

from streaming.errors import StaleSourceError, StreamingError
from streaming.sources.remote import read_chunks
from streaming.storage.errors import ChangedWhileReadError
from streaming.storage.local import LocalBackend
from tests.sources.conftest import write_parquet
from tests.sources.damage import read_source


def _parquet(root: str) -> None:
    write_parquet(root, files=2, rows=120, row_group_size=40)


def _jsonl(root: str) -> None:
    from tests.sources.test_jsonl import write_jsonl
    write_jsonl(root, files=2, rows=60)


def _tars(root: str) -> None:
    from tests.sources.test_webdataset import write_tars
    write_tars(root, tars=2, per_tar=20)


def _arrow(root: str) -> None:
    from tests.sources.test_arrow import save_dataset
    save_dataset(root, rows=600, shard_size='10KB')


WRITERS: dict[str, Callable[[str], None]] = {'parquet': _parquet, 'jsonl': _jsonl,
                                             'webdataset': _tars, 'arrow': _arrow}


def _last_file(root: str) -> str:
    from streaming.sources.registry import source_for_name
    names = sorted(n for n in os.listdir(root) if source_for_name(n) is not None)
    return os.path.join(root, names[-1])


def _rewrite_in_place(path: str) -> None:
    """Same size, one byte changed in the middle, a later mtime (as an in-place edit leaves)."""
    st = os.stat(path)
    with open(path, 'r+b') as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))


def _append(path: str) -> None:
    with open(path, 'ab') as f:
        f.write(b'\n')


def _replace(path: str) -> None:
    """Another version of the file put in its place by a rename (as an atomic writer does)."""
    with open(path, 'rb') as f:
        data = f.read()
    with open(path + '.tmp', 'wb') as f:
        f.write(data[: len(data) // 2] + data[len(data) // 2:])
        f.write(b'\0' * 512)
    os.replace(path + '.tmp', path)


CHANGES = {'in-place': _rewrite_in_place, 'appended': _append, 'replaced': _replace}


def _comparable(value: object) -> object:
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _comparable(value.tolist())
    return bytes(value) if isinstance(value, memoryview) else value


def _read_or_error(root: str, local: str, refresh: bool = True) -> object:
    """All samples (made comparable with ``==``), or the type of the typed error raised."""
    try:
        return _comparable(read_source(root, local, refresh=refresh))
    except StreamingError as error:
        return type(error)


@pytest.mark.parametrize('change', sorted(CHANGES))
@pytest.mark.parametrize('fmt', sorted(WRITERS))
def test_changed_after_indexing_is_refused_or_indexed_again(tmp_path, fmt, change) -> None:
    root = str(tmp_path / 'data')
    WRITERS[fmt](root)
    before = read_source(root, str(tmp_path / 'index-only'), fetch=False)
    assert before == []  # Indexed, nothing read.
    path = _last_file(root)
    CHANGES[change](path)
    name = os.path.basename(path)
    with pytest.raises(StaleSourceError, match=rf'{name}.*(changed|no longer)'):
        read_source(root, str(tmp_path / 'index-only'), refresh=False)
    # A stream that re-lists sees the change and reads the file as it is now: what a cold read
    # of the current files gives (samples, or the same typed error), never a mix.
    again = _read_or_error(root, str(tmp_path / 'index-only'))
    assert again == _read_or_error(root, str(tmp_path / 'cold'))


@pytest.mark.parametrize('fmt', sorted(WRITERS))
def test_changed_on_s3_after_indexing_is_refused(s3, tmp_path, fmt) -> None:
    client, bucket = s3
    root = str(tmp_path / 'data')
    WRITERS[fmt](root)
    for name in sorted(os.listdir(root)):
        if os.path.isfile(os.path.join(root, name)) and not name.startswith('_'):
            client.upload_file(os.path.join(root, name), bucket, f'p/{name}')
    url = f's3://{bucket}/p'
    cold = read_source(url, str(tmp_path / 'a'))
    read_source(url, str(tmp_path / 'b'), fetch=False)
    path = _last_file(root)
    _rewrite_in_place(path)  # The same size, another ETag once uploaded.
    client.upload_file(path, bucket, f'p/{os.path.basename(path)}')
    with pytest.raises(StaleSourceError, match=rf'{os.path.basename(path)} changed'):
        read_source(url, str(tmp_path / 'b'), refresh=False)
    assert _read_or_error(url, str(tmp_path / 'b')) == _read_or_error(url, str(tmp_path / 'c'))
    assert len(cold) > 0


def test_a_local_file_changed_while_read_is_refused(tmp_path) -> None:
    path = str(tmp_path / 'big.jsonl')
    with open(path, 'wb') as f:
        f.write(b'{"a": 1}\n' * 400_000)  # 3.6 MB: several chunks.
    chunks = LocalBackend().read(path, timeout=10).chunks
    next(chunks)
    _rewrite_in_place(path)
    with pytest.raises(ChangedWhileReadError, match=r'big\.jsonl changed while it was read'):
        list(chunks)
    chunks = read_chunks(path)
    next(chunks)
    _append(path)
    with pytest.raises(StaleSourceError, match=r'big\.jsonl.*changed while it was read'):
        list(chunks)
    assert sum(len(c) for c in read_chunks(path)) == os.path.getsize(path)  # Unchanged: fine.


def _descriptors_of(path: str) -> list[str]:
    """This process's open descriptors on ``path`` (from ``/proc/self/fd``)."""
    found = []
    for fd in os.listdir('/proc/self/fd'):
        try:
            if os.readlink(f'/proc/self/fd/{fd}') == path:
                found.append(fd)
        except OSError:  # The descriptor listdir itself used, closed meanwhile.
            pass
    return found


@pytest.mark.skipif(not os.path.isdir('/proc/self/fd'), reason='needs /proc/self/fd')
def test_a_local_file_refused_or_left_unread_is_closed_at_once(tmp_path) -> None:
    """A response's file is closed when the response is closed, read or not, and a version check
    that refuses a file before reading it closes it (not left to the garbage collector)."""
    from streaming.sources.remote import read_range
    from streaming.storage.objects import ObjectInfo
    path = str(tmp_path / 'small.bin')
    with open(path, 'wb') as f:
        f.write(bytes(range(100)))
    response = LocalBackend().read(path, 10, 20, timeout=10)
    assert len(_descriptors_of(path)) == 1
    response.close()
    assert _descriptors_of(path) == []
    refused = r'small\.bin changed since it was indexed'
    with pytest.raises(StaleSourceError, match=refused) as caught:
        read_range(path, 0, 10, expect=ObjectInfo(99, None), retries=0)
    assert caught.value.__traceback__ is not None  # Its frames (and their locals) still live.
    assert _descriptors_of(path) == [], 'the refused file is still open'
    with LocalBackend().read(path, timeout=10) as response:
        assert b''.join(response.chunks) == bytes(range(100))
    assert _descriptors_of(path) == []


def test_a_parquet_unit_changed_while_decoded_in_place_is_dropped(tmp_path) -> None:
    from streaming.dataset.source_stream import SourceStream
    root = str(tmp_path / 'data')
    _parquet(root)
    stream = SourceStream(remote=root, local=str(tmp_path / 'cache'))
    shard = stream.get_shards(stream.get_index(fetch=True), False)[0]
    assert stream.prepare_shard(shard) == 0  # Read in place: nothing copied.
    shard.data()  # The source file mapped, as decoding starts.
    path = os.path.join(root, shard.source)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # Touched while decoded.
    with pytest.raises(StaleSourceError, match=rf'{shard.source} changed since it was indexed'):
        shard.decode_checked()
    with pytest.raises(StaleSourceError):
        shard.get_item(0)  # Nothing of the decode was kept.
    shard.close()
