"""Units of data files decoded ahead, on a small pool of threads (``DecodeAhead``), and the
decoder imported as the stream is built (``SourceReader.warm_up``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError
from streaming.sources import reader as source_reader
from streaming.sources.parquet import ParquetReader
from streaming.sources.reader import DecodeAhead, decode_width
from tests.sources.conftest import write_parquet

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def two_threads(monkeypatch) -> None:
    """A decode pool of 2 threads, however many cores this machine gives the test."""
    monkeypatch.setattr(source_reader, '_pool', None)
    monkeypatch.setattr(source_reader, 'decode_width', lambda: 2)


def _dataset(root: str, cache: str, **kwargs) -> StreamingDataset:
    stream = SourceStream(remote=root, local=cache, options={'unit_bytes': 1},
                          columns=kwargs.pop('columns', None))
    return StreamingDataset(streams=[stream], batch_size=8, **kwargs)


def _record_decodes(monkeypatch) -> list[tuple[int, str]]:
    """(unit id, thread name) of every ``ParquetReader.decode`` from now on."""
    calls: list[tuple[int, str]] = []
    decode = ParquetReader.decode

    def recorded(self):  # noqa: ANN001, ANN202
        calls.append((id(self), threading.current_thread().name))
        return decode(self)

    monkeypatch.setattr(ParquetReader, 'decode', recorded)
    return calls


def test_a_batch_decodes_its_units_on_the_pool_once_each(parquet_dir, tmp_path,
                                                         monkeypatch) -> None:
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1')
    dataset = _dataset(parquet_dir, str(tmp_path / 'cache'), columns=['id', 'blob'],
                       shuffle=True, shuffle_seed=5)
    calls = _record_decodes(monkeypatch)
    ids = [i for batch in StreamingDataLoader(dataset, batch_size=8) for i in
           batch['id'].tolist()]
    assert sorted(ids) == list(range(750))
    # 3 files of 250 rows in row groups of 64: 12 units, each decoded once (all fit the
    # decoded budget), most of them by the pool while the batch reads another.
    assert len(calls) == len({unit for unit, _ in calls}) == 12
    assert sum(name.startswith('streaming-decode') for _, name in calls) >= 6


def test_decoding_runs_at_most_the_pool_width_ahead(parquet_dir, tmp_path) -> None:
    readers = list(_dataset(parquet_dir, str(tmp_path / 'cache')).shards)
    ahead = DecodeAhead(readers)
    width = 2
    try:
        for reader in readers:
            assert len(ahead.futures) <= width
            ahead.wait(reader)
            assert reader.decoded is not None
        assert not ahead.futures
    finally:
        ahead.close()


def test_closed_early_no_decode_runs_on(parquet_dir, tmp_path) -> None:
    readers = list(_dataset(parquet_dir, str(tmp_path / 'cache')).shards)
    ahead = DecodeAhead(readers)
    ahead.wait(readers[0])
    pending = list(ahead.futures.values())
    ahead.close()
    assert pending and all(future.done() for _, future in pending) and not ahead.futures
    # What was not started is cancelled; what was decoded is kept, not decoded again when the
    # reads go on without the pool (a batch read sample by sample after all).
    assert all((reader.decoded is None) == future.cancelled() for reader, future in pending)
    submitted = {id(reader) for reader, _ in pending} | {id(readers[0])}
    assert all(reader.decoded is None for reader in readers if id(reader) not in submitted)


def test_a_unit_that_fails_to_decode_raises_its_error_from_the_batch(tmp_path,
                                                                     monkeypatch) -> None:
    import pyarrow.parquet as pq
    monkeypatch.setenv('STREAMING_BATCH_FETCH', '1')
    root = str(tmp_path / 'data')
    write_parquet(root, compression='snappy')
    path = os.path.join(root, 'part-002.parquet')
    column = pq.read_metadata(path).row_group(1).column(0)
    with open(path, 'r+b') as f:  # The id chunk of row group 1 overwritten.
        f.seek(column.data_page_offset)
        f.write(b'\xff' * column.total_compressed_size)
    dataset = _dataset(root, str(tmp_path / 'cache'), columns=['id'], shuffle=True)
    with pytest.raises(SourceFileError, match=r'row group 1 of part-002\.parquet'):
        for _ in StreamingDataLoader(dataset, batch_size=8):
            pass


def test_building_a_parquet_stream_imports_pyarrow_not_importing_streaming(
        parquet_dir, tmp_path) -> None:
    # Forked DataLoader workers then inherit pyarrow, instead of each importing it inside its
    # first batch.
    code = (
        'import sys\n'
        'import streaming\n'
        'assert "pyarrow" not in sys.modules\n'
        'from streaming import SourceStream, StreamingDataset\n'
        'stream = SourceStream(remote=sys.argv[1], local=sys.argv[2],\n'
        '                      options={"unit_bytes": 1})\n'
        'StreamingDataset(streams=[stream], batch_size=4)\n'
        'print("pyarrow.parquet" in sys.modules)\n')
    cache = str(tmp_path / 'cache')
    _dataset(parquet_dir, cache)  # The sidecar exists: no footer is read, pyarrow is not
    # needed to build the dataset.
    out = subprocess.run([sys.executable, '-c', code, parquet_dir, cache], cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == 'True', out.stderr


class _Widths(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        return decode_width()


def test_the_width_is_the_process_share_of_the_cores(monkeypatch) -> None:
    monkeypatch.undo()  # The real decode_width, not the fixture's.
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv('LOCAL_WORLD_SIZE', raising=False)
    assert decode_width() == min(4, cores)
    workers = torch.utils.data.DataLoader(_Widths(), batch_size=None, num_workers=2)
    assert [int(w) for w in workers] == [max(1, min(4, cores // 2))] * 2
    monkeypatch.setenv('LOCAL_WORLD_SIZE', str(cores))  # A rank per core: decode in line.
    assert decode_width() == 1
    monkeypatch.setattr(source_reader, '_pool', None)
    assert source_reader._decode_pool() is None
    readers = [object.__new__(ParquetReader) for _ in range(3)]
    assert not DecodeAhead(readers).futures
