"""Units of compressed Parquet decoded once per node and mapped by the other DataLoader workers
(``cache.decoded_units``, ``sources.unit_file``): real workers, real files, real kills."""

from __future__ import annotations

import errno
import glob
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.format.mds.reader import Spans
from streaming.sources import parquet as parquet_source
from streaming.sources import unit_file
from streaming.sources.arrow_values import with_spans
from streaming.sources.parquet import ParquetReader
from streaming.sources.unit_file import map_unit, write_unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES, ROWS, GROUP = 3, 60, 20  # 9 row groups: 9 units (unit_bytes=1).
WIDE = 20 << 10  # Values this wide are read from their pages (parquet_pages), not by pyarrow.


def write_dataset(root: str, compression: str = 'snappy') -> None:
    """Files with a wide binary column (read from pages) and narrow ones (read by pyarrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(root, exist_ok=True)
    for f in range(FILES):
        ids = np.arange(f * ROWS, (f + 1) * ROWS)
        rng = np.random.RandomState(f)
        images = [bytes(rng.randint(0, 4, WIDE + int(i) % 7, dtype=np.uint8)) for i in ids]
        table = pa.table({
            'id': pa.array(ids, pa.int64()),
            'image': pa.array(images, pa.binary()),
            'text': pa.array([f'word{i % 5}' for i in ids]).dictionary_encode(),
            'tokens': pa.array([[int(i) % 9, 1, 2, int(i)] for i in ids], pa.list_(pa.int32())),
            'caption': pa.array([f'row {i}' * (int(i) % 4) for i in ids]),
        })
        pq.write_table(table, os.path.join(root, f'part-{f}.parquet'), row_group_size=GROUP,
                       compression=compression)


def _dataset(root: str, cache: str) -> StreamingDataset:
    stream = SourceStream(remote=root, local=cache, options={'unit_bytes': 1})
    return StreamingDataset(streams=[stream], batch_size=8, shuffle=True, shuffle_seed=3)


def _samples(dataset: StreamingDataset, workers: int) -> dict[int, dict]:
    """Every sample of one epoch by id, each column as plain Python values."""
    out: dict[int, dict] = {}
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=workers)
    for batch in loader:
        for row, sample_id in enumerate(batch['id'].tolist()):
            assert sample_id not in out, f'sample {sample_id} seen twice'
            out[sample_id] = {name: _plain(value, row) for name, value in batch.items()}
    return out


def _plain(column, row: int):  # noqa: ANN001, ANN202 - a collated column.
    value = column[row]
    return value.tolist() if hasattr(value, 'tolist') else value


@pytest.fixture
def data(tmp_path) -> str:
    root = str(tmp_path / 'data')
    write_dataset(root)
    return root


def test_two_workers_decode_each_unit_once_and_read_what_one_process_reads(
        data, tmp_path) -> None:
    alone = _samples(_dataset(data, str(tmp_path / 'cache0')), workers=0)
    dataset = _dataset(data, str(tmp_path / 'cache2'))
    shared = _samples(dataset, workers=2)
    assert sorted(shared) == list(range(FILES * ROWS))
    assert shared == alone
    assert dataset.cache.decoded.decodes().tolist() == [1] * dataset.num_shards
    # The decoded units are in the node's shared directory, within its budget.
    files = glob.glob(os.path.join(dataset.cache.decoded.directory, 'unit-*'))
    assert 0 < len(files) <= dataset.num_shards
    # Another epoch maps them again: nothing is decoded twice.
    assert _samples(dataset, workers=2) == alone
    assert dataset.cache.decoded.decodes().tolist() == [1] * dataset.num_shards


def test_the_shared_files_stay_within_their_budget(data, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv('STREAMING_SHARED_DECODED_BYTES', '1')  # Room for the newest only.
    alone = _samples(_dataset(data, str(tmp_path / 'cache0')), workers=0)
    dataset = _dataset(data, str(tmp_path / 'cache2'))
    assert _samples(dataset, workers=2) == alone
    store = dataset.cache.decoded
    assert len(glob.glob(os.path.join(store.directory, 'unit-*'))) == 1
    sizes = dataset._shared.array('unit_file_bytes')
    assert (sizes > 0).sum() == 1 and dataset._shared.array('unit_files_total')[0] == sizes.sum()
    assert store.decodes().sum() >= dataset.num_shards  # Removed ones are decoded again.


def test_uncompressed_pages_are_read_by_each_process_without_waiting(tmp_path) -> None:
    root = str(tmp_path / 'plain')
    write_dataset(root, compression='none')
    dataset = _dataset(root, str(tmp_path / 'cache'))
    assert len(_samples(dataset, workers=2)) == FILES * ROWS
    directory = dataset.cache.decoded.directory
    # Nothing decoded was shared: a marker per unit says "read it yourself".
    assert not glob.glob(os.path.join(directory, 'unit-*[0-9]'))
    assert len(glob.glob(os.path.join(directory, 'unit-*.local'))) == dataset.num_shards


_RUN = '''
import json, sys
from tests.sources.test_decode_once import _dataset, _samples
dataset = _dataset(sys.argv[1], sys.argv[2])
samples = _samples(dataset, workers=2)
print(json.dumps({'samples': len(samples),
                  'decodes': dataset.cache.decoded.decodes().tolist()}))
'''


_RANK = '''
import json, os, sys
import torch.distributed as dist
from streaming import StreamingDataLoader
from tests.sources.test_decode_once import _dataset
dist.init_process_group('gloo', init_method='file://' + sys.argv[3],
                        rank=int(os.environ['RANK']), world_size=2)
dataset = _dataset(sys.argv[1], sys.argv[2])
ids = [i for batch in StreamingDataLoader(dataset, batch_size=8) for i in batch['id'].tolist()]
dist.barrier()  # Both ranks done: the node's count is final.
print(json.dumps({'ids': ids, 'decodes': dataset.cache.decoded.decodes().tolist()}))
dist.barrier()
dist.destroy_process_group()
'''


def test_two_ranks_of_a_node_decode_each_unit_once(data, tmp_path) -> None:
    procs = []
    for rank in range(2):
        env = {**os.environ, 'RANK': str(rank), 'WORLD_SIZE': '2', 'LOCAL_RANK': str(rank),
               'LOCAL_WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1',
               'MASTER_PORT': str(20000 + os.getpid() % 20000), 'PYTHONPATH': REPO}
        procs.append(subprocess.Popen(
            [sys.executable, '-c', _RANK, data, str(tmp_path / 'cache'),
             str(tmp_path / 'rendezvous')], cwd=REPO, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    first, second = (set(result['ids']) for result in results)
    assert not first & second and sorted(first | second) == list(range(FILES * ROWS))
    assert results[0]['decodes'] == results[1]['decodes'] == [1] * (FILES * ROWS // GROUP)


def test_the_shared_directory_ends_clean(data, tmp_path) -> None:
    shm = tmp_path / 'shm'
    shm.mkdir()
    env = {**os.environ, 'STREAMING_SHM_DIR': str(shm), 'PYTHONPATH': REPO}
    out = subprocess.run([sys.executable, '-c', _RUN, data, str(tmp_path / 'cache')],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result['samples'] == FILES * ROWS
    assert result['decodes'] == [1] * (FILES * ROWS // GROUP)
    assert os.listdir(shm) == []  # The decoded units went with the shared directory.


def test_a_unit_file_round_trips_and_a_partial_one_is_refused(data, tmp_path) -> None:
    dataset = _dataset(data, str(tmp_path / 'cache'))
    reader = dataset.cache.ready(0)
    assert isinstance(reader, ParquetReader)
    path = str(tmp_path / 'unit')
    columns = reader.decode_columns()
    assert columns.spans and columns.table is not None and columns.shared
    with open(path, 'wb') as file:
        size = write_unit(file, columns)
    assert os.path.getsize(path) == size
    mapped, _ = map_unit(path)
    direct, _ = reader.accessors(reader.decode_columns())
    again, _ = reader.accessors(mapped)
    for name in columns.names:
        assert [_plain([direct.getters[name](i)], 0) for i in range(GROUP)] == \
            [_plain([again.getters[name](i)], 0) for i in range(GROUP)], name
    for cut in (size - 1, size // 2, 10):  # A file cut short is never read as a unit.
        with open(path, 'r+b') as file:
            file.truncate(cut)
        with pytest.raises(ValueError):
            map_unit(path)


def _decode_then_hang(dataset: StreamingDataset, ready) -> None:  # noqa: ANN001
    """In a forked child: decode unit 0, write part of its file, then hang (to be killed)."""
    def half_then_hang(file, columns, *sections):  # noqa: ANN001, ANN002, ANN202
        file.write(b'x' * 4096)
        file.flush()
        ready.send('writing')
        time.sleep(600)

    parquet_source.write_unit = half_then_hang  # Its pages are written by then.
    dataset.cache.decoded.unit(0, dataset.cache.ready(0))


def test_a_decoder_killed_mid_write_leaves_nothing_that_reads_as_a_unit(data, tmp_path) -> None:
    dataset = _dataset(data, str(tmp_path / 'cache'))
    store = dataset.cache.decoded
    context = multiprocessing.get_context('fork')
    ours, theirs = context.Pipe()
    child = context.Process(target=_decode_then_hang, args=(dataset, theirs), daemon=True)
    child.start()
    try:
        assert ours.poll(120) and ours.recv() == 'writing'
        assert not os.path.exists(store.path(0))  # Not under its final name.
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(30)
    assert glob.glob(os.path.join(store.directory, '.unit-0.*'))  # Its temporary file.
    assert store.decodes()[0] == 0  # Counted once a decode is whole.
    reader = dataset.cache.ready(0)
    columns = store.unit(0, reader)  # The dead decoder's lock is free: decoded again here.
    assert store.decodes()[0] == 1
    assert not glob.glob(os.path.join(store.directory, '.unit-0.*'))
    decoded, _ = reader.accessors(columns)
    assert [decoded.getters['id'](i) for i in range(GROUP)] == list(range(GROUP))
    assert map_unit(store.path(0))[0].names == columns.names


def test_a_shared_unit_is_written_as_decoded_and_gives_bytes_as_spans_of_its_map(
        data, tmp_path) -> None:
    stream = SourceStream(remote=data, local=str(tmp_path / 'cache'), options={'unit_bytes': 1},
                          columns=['id', 'image', 'caption'])  # Columns a batch gathers.
    reader = StreamingDataset(streams=[stream], batch_size=8).cache.ready(1)
    path = str(tmp_path / 'unit')
    with open(path, 'wb') as file:
        columns, size = reader.write_decoded(file)
    assert columns is None and os.path.getsize(path) == size  # Its pages went to the file.
    mapped, _ = map_unit(path)
    decoded, _ = reader.accessors(mapped)
    direct, _ = reader.accessors(reader.decode_columns())
    picks = np.array([5, 0, GROUP - 1, 5])
    spans = with_spans(decoded.gatherers['image'])(picks)
    assert isinstance(spans, Spans) and spans.data is mapped.base  # Not copied out.
    expected = [direct.getters['image'](i) for i in picks.tolist()]
    assert spans.values() == decoded.gatherers['image'](picks) == expected
    assert not isinstance(with_spans(decoded.gatherers['caption'])(picks), Spans)  # str


def test_narrow_binary_values_of_several_row_groups_are_spans_of_the_unit_file(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = tmp_path / 'narrow'
    root.mkdir()
    blobs = [bytes([i % 251]) * (50 + i) for i in range(40)]
    pq.write_table(pa.table({'id': pa.array(range(40), pa.int64()),
                             'blob': pa.array(blobs, pa.binary())}),
                   str(root / 'part.parquet'), row_group_size=10, compression='zstd')
    stream = SourceStream(remote=str(root), local=str(tmp_path / 'cache'),
                          options={'unit_bytes': 1 << 20})  # One unit of 4 row groups.
    reader = StreamingDataset(streams=[stream], batch_size=8).cache.ready(0)
    path = str(tmp_path / 'unit')
    with open(path, 'wb') as file:
        reader.write_decoded(file)
    mapped, _ = map_unit(path)
    assert mapped.table is not None and mapped.table.column('blob').num_chunks == 4
    gather = reader.accessors(mapped)[0].gatherers['blob']
    picks = np.array([39, 0, 12, 25, 12])
    spans = with_spans(gather)(picks)
    assert isinstance(spans, Spans)
    assert spans.values() == gather(picks) == [blobs[i] for i in picks.tolist()]


def test_a_unit_file_that_cannot_be_written_is_decoded_for_this_process(
        data, tmp_path, monkeypatch) -> None:
    # A full shared directory cannot be made here (/dev/shm is shared with the machine): the
    # unit file's writes fail as they would with ENOSPC.
    def full(self, data):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, 'No space left on device')

    dataset = _dataset(data, str(tmp_path / 'cache'))
    store = dataset.cache.decoded
    reader = dataset.cache.ready(2)
    monkeypatch.setattr(unit_file.Sections, 'add', full)
    columns = store.unit(2, reader)
    decoded, _ = reader.accessors(columns)
    assert [decoded.getters['id'](i) for i in range(GROUP)] == list(range(40, 40 + GROUP))
    monkeypatch.undo()
    direct, _ = reader.accessors(reader.decode_columns())
    assert [decoded.getters['image'](i) for i in range(GROUP)] == \
        [direct.getters['image'](i) for i in range(GROUP)]
    assert store.decodes()[2] == 1
    assert os.listdir(store.directory) == []  # Nothing published, no temporary file left.


def test_two_workers_hand_off_bytes_straight_from_the_shared_units(data, tmp_path) -> None:
    def dataset(cache: str) -> StreamingDataset:  # Columns a batch gathers (no lists).
        stream = SourceStream(remote=data, local=cache, options={'unit_bytes': 1},
                              columns=['id', 'image', 'caption'])
        return StreamingDataset(streams=[stream], batch_size=8, shuffle=True, shuffle_seed=3)

    alone = _samples(dataset(str(tmp_path / 'cache0')), workers=0)
    shared_dataset = dataset(str(tmp_path / 'cache2'))
    loader = StreamingDataLoader(shared_dataset, batch_size=8, num_workers=2)
    shared: dict[int, dict] = {}
    for batch in loader:
        for row, sample_id in enumerate(batch['id'].tolist()):
            shared[sample_id] = {name: _plain(value, row) for name, value in batch.items()}
    assert sorted(shared) == list(range(FILES * ROWS)) and shared == alone
    assert shared_dataset.cache.decoded.decodes().tolist() == [1] * shared_dataset.num_shards
    rows = loader.stats.workers()  # Both read their share; their fetch CPU is recorded.
    assert len(rows) == 2 and all(row['samples'] > 0 and row['fetch_cpu_s'] > 0 for row in rows)
