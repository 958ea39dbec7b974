"""Writers: one per output directory, a full disk and an unwritable ``out`` as typed errors."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import uuid
from typing import Any, Iterator

import numpy as np
import pytest

from streaming import JSONWriter, LocalDataset, MDSWriter
from streaming.errors import OutputError, OutputLockedError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_second_writer_in_this_process_fails_at_once(tmp_path: Any) -> None:
    out = str(tmp_path / 'out')
    with MDSWriter(out=out, columns={'a': 'int'}) as first:
        first.write({'a': 1})
        for kwargs in [{}, {'exist_ok': True}]:
            with pytest.raises(OutputLockedError) as info:
                JSONWriter(out=out, columns={'a': 'int'}, **kwargs)
            assert repr(out) in str(info.value)
            assert f'in this process, pid {os.getpid()}' in str(info.value)
        first.write({'a': 2})
    # exist_ok=True did not empty the directory under the first writer.
    assert [s['a'] for s in LocalDataset(out)] == [1, 2]
    # Once the first is done, the directory is free again.
    with MDSWriter(out=out, columns={'a': 'int'}, exist_ok=True) as again:
        again.write({'a': 3})
    assert [s['a'] for s in LocalDataset(out)] == [3]


def test_second_writer_in_another_process_names_it(tmp_path: Any) -> None:
    out = str(tmp_path / 'out')
    code = (f'import sys; from streaming import MDSWriter\n'
            f'w = MDSWriter(out={out!r}, columns={{"a": "int"}})\n'
            f'print("ready", flush=True); sys.stdin.readline(); w.finish()\n')
    env = {**os.environ, 'PYTHONPATH': ROOT}
    holder = subprocess.Popen([sys.executable, '-c', code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == 'ready'
        with pytest.raises(OutputLockedError, match=f'held by process {holder.pid}'):
            MDSWriter(out=out, columns={'a': 'int'}, exist_ok=True)
    finally:
        holder.communicate('\n', timeout=60)
    assert holder.returncode == 0


@contextlib.contextmanager
def _tmpfs(path: str, options: str) -> Iterator[str]:
    os.makedirs(path)
    result = subprocess.run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', path],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f'cannot mount a tmpfs here (needs root in a mount namespace): '
                    f'{result.stderr.strip()}')
    try:
        yield path
    finally:
        subprocess.run(['umount', '-l', path], check=False)


@pytest.mark.parametrize('compression', [None, 'zstd'])
def test_full_disk_is_a_typed_error_and_leaves_no_index(tmp_path: Any,
                                                        compression: str | None) -> None:
    with _tmpfs(str(tmp_path / f'small-{uuid.uuid4().hex[:6]}'), 'size=256k') as disk:
        out = os.path.join(disk, 'out')
        rng = np.random.default_rng(0)
        with pytest.raises(OutputError) as info:
            with MDSWriter(out=out, columns={'b': 'bytes'}, size_limit=1 << 15,
                           compression=compression) as writer:
                for _ in range(200):
                    writer.write({'b': rng.bytes(4000)})
        assert info.value.errno == errno.ENOSPC
        assert out in str(info.value) and 'shard.' in str(info.value)
        assert not os.path.exists(os.path.join(out, 'index.json'))
        assert not [n for n in os.listdir(out) if n.endswith('.tmp')]


def test_out_under_a_file_names_out(tmp_path: Any) -> None:
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    for cls in (MDSWriter, JSONWriter):
        with pytest.raises(OutputError, match=r"^out='.*/file/out' cannot be created"):
            cls(out=str(blocker / 'out'), columns={'a': 'int'})
    with pytest.raises(OutputError, match=r"^out='.*/file/out' cannot be created"):
        MDSWriter(out=(str(blocker / 'out'), str(tmp_path / 'remote')), columns={'a': 'int'})


def test_read_only_out_names_out(tmp_path: Any) -> None:
    with _tmpfs(str(tmp_path / 'ro'), 'ro,size=64k') as disk:
        with pytest.raises(OutputError, match=r"^out='.*' (is not writable|cannot be created)"):
            MDSWriter(out=disk, columns={'a': 'int'})
        with pytest.raises(OutputError, match=r"^out='.*/sub' cannot be created"):
            MDSWriter(out=os.path.join(disk, 'sub'), columns={'a': 'int'})
