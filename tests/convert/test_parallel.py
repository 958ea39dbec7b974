"""``write_parallel``: several real processes write parts that merge into one dataset."""

from __future__ import annotations

import os
from functools import partial

import pytest

from streaming.convert import write_parallel

COLUMNS = {'id': 'int', 'text': 'str'}


def numbered(part: int, parts: int, total: int, fail_part: int = -1):
    if part == fail_part:
        raise RuntimeError(f'boom in part {part}')
    for i in range(part * total // parts, (part + 1) * total // parts):
        yield {'id': i, 'text': f'sample {i}'}


def _read(path: str) -> list[dict]:
    from streaming import LocalDataset
    ds = LocalDataset(path)
    return [ds[i] for i in range(len(ds))]


def test_callable_source_keeps_order(tmp_path) -> None:
    out = str(tmp_path / 'out')
    names = write_parallel(partial(numbered, total=1000), out, columns=COLUMNS, workers=3,
                           compression='zstd', hashes=['xxh64'], size_limit=2048,
                           progress_bar=False)
    assert names == ['part-00000', 'part-00001', 'part-00002']
    assert sorted(os.listdir(out)) == ['index.json', *names]
    assert [s['id'] for s in _read(out)] == list(range(1000))


def test_iterable_source_is_dealt_in_chunks(tmp_path) -> None:
    out = str(tmp_path / 'out')
    source = [{'id': i, 'text': str(i)} for i in range(500)]
    write_parallel(source, out, columns=COLUMNS, workers=2, chunk_size=100, writer='json',
                   progress_bar=False)
    got = [s['id'] for s in _read(out)]
    # Chunks 0, 2, 4 went to part 0 and chunks 1, 3 to part 1.
    assert got == [*range(0, 100), *range(200, 300), *range(400, 500), *range(100, 200),
                   *range(300, 400)]


def test_local_and_remote_pair(tmp_path) -> None:
    local, remote = str(tmp_path / 'scratch'), str(tmp_path / 'remote')
    write_parallel(partial(numbered, total=200), (local, remote), columns=COLUMNS, workers=2,
                   progress_bar=False)
    assert [s['id'] for s in _read(remote)] == list(range(200))
    assert not os.path.exists(os.path.join(local, 'part-00000'))  # keep_local=False


def test_a_failing_worker_stops_the_run(tmp_path) -> None:
    with pytest.raises(RuntimeError, match=r'part 1 of 2 failed:[\s\S]*boom in part 1'):
        write_parallel(partial(numbered, total=100, fail_part=1), str(tmp_path / 'out'),
                       columns=COLUMNS, workers=2, progress_bar=False)
    assert not os.path.exists(tmp_path / 'out' / 'index.json')
    with pytest.raises(ValueError, match="writer must be one of"):
        write_parallel([], str(tmp_path / 'x'), columns=COLUMNS, writer='parquet')


def test_a_failure_in_the_calling_process_part_stops_the_workers(tmp_path) -> None:
    # Part 0 is written by the calling process itself.
    with pytest.raises(RuntimeError, match=r'part 0 of 2 failed: boom in part 0'):
        write_parallel(partial(numbered, total=100, fail_part=0), str(tmp_path / 'out'),
                       columns=COLUMNS, workers=2, progress_bar=False)
    assert not os.path.exists(tmp_path / 'out' / 'index.json')


def dies(part: int, parts: int):
    if part == 1:
        os._exit(3)  # No traceback, no message: the process just ends.
    yield from numbered(part, parts, 10_000_000)  # Long enough to be stopped.


def test_a_worker_that_dies_silently_stops_the_calling_process_part(tmp_path) -> None:
    with pytest.raises(RuntimeError, match=r'part 1 of 2 failed:\nworker exited with code 3'):
        write_parallel(dies, str(tmp_path / 'out'), columns=COLUMNS, workers=2,
                       progress_bar=False)
    assert not os.path.exists(tmp_path / 'out' / 'index.json')


def test_one_worker_writes_in_the_calling_process(tmp_path) -> None:
    out = str(tmp_path / 'out')
    assert write_parallel(partial(numbered, total=50), out, columns=COLUMNS, workers=1,
                          progress_bar=False) == ['part-00000']
    assert [s['id'] for s in _read(out)] == list(range(50))


@pytest.mark.parametrize('workers', [1, 2])
def test_the_progress_bar_counts_every_part(tmp_path, capsys, workers) -> None:
    write_parallel(partial(numbered, total=3000), str(tmp_path / 'out'), columns=COLUMNS,
                   workers=workers, progress_bar=True)
    last = capsys.readouterr().err.replace('\r', '\n').strip().splitlines()[-1]
    assert last.startswith(f'Writing {workers} parts: 3000sample'), last
