"""The shard cache on a shared machine: no write through planted symlinks, a private default
cache directory, nothing read or written outside ``local``, an unwritable ``local`` named."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from typing import Any

import pytest

from streaming import StreamingDataset
from streaming.dataset.stream import Stream
from streaming.errors import OutputError, ShardFileError
from tests.dataset.conftest import write_ids


@pytest.mark.parametrize('compression', [None, 'zstd'])
def test_planted_symlinks_are_not_written_through(tmp_path: Any, compression: str | None) -> None:
    remote = write_ids(str(tmp_path / 'remote'), 100, compression=compression)
    local = tmp_path / 'cache'
    local.mkdir()
    victim = tmp_path / 'victim'
    victim.write_bytes(b'precious')
    names = [n for n in os.listdir(remote) if n.startswith('shard.')]
    for name in names:
        os.symlink(victim, local / name)
        if compression:
            os.symlink(victim, local / name[:-len('.zstd')])
    dataset = StreamingDataset(remote=remote, local=str(local), batch_size=4)
    assert sorted(s['id'] for s in dataset) == list(range(100))
    assert victim.read_bytes() == b'precious'
    for name in os.listdir(local):
        assert not os.path.islink(local / name), name


def test_symlink_the_size_of_the_shard_is_not_trusted(tmp_path: Any) -> None:
    """A planted link to a file of exactly the shard's size is replaced, never read."""
    remote = write_ids(str(tmp_path / 'remote'), 50, size_limit=1 << 20)
    local = tmp_path / 'cache'
    local.mkdir()
    victim = tmp_path / 'victim'
    victim.write_bytes(b'\0' * os.path.getsize(os.path.join(remote, 'shard.00000.mds')))
    os.symlink(victim, local / 'shard.00000.mds')
    dataset = StreamingDataset(remote=remote, local=str(local), batch_size=4)
    assert sorted(s['id'] for s in dataset) == list(range(50))
    assert set(victim.read_bytes()) == {0}


def test_symlinked_subdirectory_is_refused(tmp_path: Any) -> None:
    """Basenames with a directory part must stay inside local even through symlinks."""
    remote = tmp_path / 'remote'
    write_ids(str(remote / 'part'), 20, size_limit=1 << 20)
    index = json.loads((remote / 'part' / 'index.json').read_text())
    for shard in index['shards']:
        shard['raw_data']['basename'] = 'part/' + shard['raw_data']['basename']
    (remote / 'index.json').write_text(json.dumps(index))
    local = tmp_path / 'cache'
    local.mkdir()
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    os.symlink(elsewhere, local / 'part')
    dataset = StreamingDataset(remote=str(remote), local=str(local), batch_size=4)
    with pytest.raises(ShardFileError, match='outside the cache directory'):
        dataset[0]
    assert os.listdir(elsewhere) == []


def test_default_cache_dir_is_the_references_and_private(monkeypatch: Any,
                                                          tmp_path: Any) -> None:
    monkeypatch.delenv('STREAMING_CACHE_DIR', raising=False)
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    digest = hashlib.blake2s(b's3://bucket/x', digest_size=16).hexdigest()
    assert Stream(remote='s3://bucket/x').local == str(tmp_path / digest) + os.sep
    assert Stream(remote='s3://bucket/x', split='train').local == str(tmp_path / digest / 'train')
    st = os.stat(tmp_path / digest)
    assert st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
    monkeypatch.setenv('STREAMING_CACHE_DIR', str(tmp_path / 'root'))
    assert Stream(remote='s3://bucket/x').local == str(tmp_path / 'root' / digest) + os.sep


def test_default_cache_dir_owned_by_someone_else_is_refused(monkeypatch: Any,
                                                            tmp_path: Any) -> None:
    monkeypatch.delenv('STREAMING_CACHE_DIR', raising=False)
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    root = tmp_path / hashlib.blake2s(b's3://bucket/x', digest_size=16).hexdigest()
    root.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(root, 65534, 65534)  # nobody
        with pytest.raises(OutputError, match=r'^local: .* not a private directory.*uid 65534'):
            Stream(remote='s3://bucket/x')
        os.chown(root, 0, 0)
    os.chmod(root, 0o777)
    with pytest.raises(OutputError, match=r'^local: .* not a private directory.*mode 777'):
        Stream(remote='s3://bucket/x')
    root.rmdir()
    os.symlink(tmp_path, root)
    with pytest.raises(OutputError, match=r'^local: .* a symlink'):
        Stream(remote='s3://bucket/x')


def test_unwritable_local_names_local(tmp_path: Any) -> None:
    remote = write_ids(str(tmp_path / 'remote'), 20)
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    with pytest.raises(OutputError, match=r"^local='.*/file/cache' cannot be created"):
        StreamingDataset(remote=remote, local=str(blocker / 'cache'), batch_size=4)
    ro = tmp_path / 'ro'
    ro.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', str(ro)],
                      capture_output=True).returncode != 0:
        return  # The file-as-parent case above covers it where no tmpfs can be mounted.
    try:
        with pytest.raises(OutputError, match=r"^local='.*/ro/cache' cannot be created"):
            StreamingDataset(remote=remote, local=str(ro / 'cache'), batch_size=4)
    finally:
        subprocess.run(['umount', '-l', str(ro)], check=False)
