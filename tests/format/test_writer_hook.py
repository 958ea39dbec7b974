"""The format writers' ``on_file_done`` hook, and the public writers built on it."""

from __future__ import annotations

import os
from typing import Any

import pytest

from streaming import JSONWriter, LocalDataset, MDSWriter
from streaming.format.json import JSONWriter as LocalJSONWriter
from streaming.format.mds import MDSWriter as LocalMDSWriter


@pytest.mark.parametrize('compression', [None, 'zstd'])
def test_hook_sees_each_finished_file_then_the_index(tmp_path: Any,
                                                     compression: str | None) -> None:
    out = str(tmp_path / 'out')
    seen = []

    def done(basename: str) -> None:
        assert os.path.isfile(os.path.join(out, basename))  # Published before the call.
        seen.append(basename)

    with LocalJSONWriter(out=out, columns={'x': 'int'}, size_limit=40, on_file_done=done,
                         compression=compression) as writer:
        for i in range(30):
            writer.write({'x': i})
    assert seen[-1] == 'index.json'
    suffix = '.zstd' if compression else ''
    shards = sorted(seen[:-1])
    assert shards == sorted(set(shards)) and len(shards) > 2
    assert all(name.endswith(suffix) for name in shards)
    on_disk = sorted(n for n in os.listdir(out) if n != 'index.json')
    assert on_disk == shards  # Nothing else left: no temporary files.
    assert [LocalDataset(out)[i]['x'] for i in range(30)] == list(range(30))


def test_format_writer_takes_only_a_local_directory(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match='local directory'):
        LocalMDSWriter(out=(str(tmp_path / 'a'), str(tmp_path / 'b')), columns={'x': 'int'})


def test_public_writer_checks_arguments_before_touching_out(tmp_path: Any) -> None:
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'keep.txt').write_text('precious')
    with pytest.raises(ValueError):
        MDSWriter(out=str(out), columns={'x': 'no-such-encoding'}, exist_ok=True)
    with pytest.raises(ValueError):
        JSONWriter(out=str(out), columns={'x': 'int'}, compression='nope', exist_ok=True)
    with pytest.raises(ValueError, match='Unknown writer argument'):
        MDSWriter(out=str(out), columns={'x': 'int'}, exist_ok=True, colour='blue')
    assert (out / 'keep.txt').read_text() == 'precious'


def test_public_writer_uploads_to_a_local_remote(tmp_path: Any) -> None:
    staging, remote = str(tmp_path / 'staging'), str(tmp_path / 'remote')
    with MDSWriter(out=(staging, remote), columns={'x': 'int'}, size_limit=64) as writer:
        for i in range(40):
            writer.write({'x': i})
    assert not os.path.exists(staging)  # Not kept: the staging copies are gone.
    assert [LocalDataset(remote)[i]['x'] for i in range(40)] == list(range(40))


def test_uploading_writer_keeps_a_given_hook(tmp_path: Any) -> None:
    from streaming.writing import UploadingWriter

    class HookedJSONWriter(UploadingWriter, LocalJSONWriter):
        pass

    remote = str(tmp_path / 'remote')
    seen = []
    with HookedJSONWriter(out=(str(tmp_path / 'staging'), remote), columns={'x': 'int'},
                          keep_local=True, on_file_done=seen.append) as writer:
        writer.write({'x': 1})
    assert seen == ['shard.00000.json.meta', 'shard.00000.json', 'index.json']
    assert sorted(os.listdir(remote)) == sorted(seen)  # Each was uploaded before the hook ran.
