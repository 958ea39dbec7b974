"""Fixtures for the source-format tests: files written by the real producers (pyarrow, ...)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming.sources import parquet, parquet_pages
from tests.storage.conftest import moto, s3  # noqa: F401  (the moto S3 server fixtures)


def write_parquet(root: str, files: int = 3, rows: int = 250, row_group_size: int = 64,
                  compression: str = 'zstd', start: int = 0) -> list[str]:
    """``files`` Parquet files written by pyarrow; row ``i`` has id ``start + i`` overall.

    Columns: id (int64), text (dictionary-encoded string), tokens (list<int32>), nested
    (list<list<int16>>), blob (binary), point (struct), fixed (fixed_size_list<float32>[3]).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(root, exist_ok=True)
    paths = []
    for f in range(files):
        ids = np.arange(start + f * rows, start + (f + 1) * rows)
        rng = np.random.RandomState(f)
        table = pa.table({
            'id': pa.array(ids, pa.int64()),
            'text': pa.array([f'word{i % 5}' for i in ids]).dictionary_encode(),
            'tokens': pa.array([rng.randint(0, 50000, i % 9).tolist() for i in ids],
                               pa.list_(pa.int32())),
            'nested': pa.array([[[int(i), 1], [2, 3]] for i in ids],
                               pa.list_(pa.list_(pa.int16()))),
            'blob': pa.array([rng.bytes(int(i % 13)) for i in ids], pa.binary()),
            'point': pa.array([{'x': int(i), 'y': float(i) / 2} for i in ids]),
            'fixed': pa.array([[float(i), 0.5, -1.0] for i in ids], pa.list_(pa.float32(), 3)),
        })
        path = os.path.join(root, f'part-{f:03d}.parquet')
        pq.write_table(table, path, row_group_size=row_group_size, compression=compression)
        paths.append(path)
    return paths


@pytest.fixture
def parquet_dir(tmp_path) -> str:
    root = str(tmp_path / 'data')
    write_parquet(root)
    return root


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's hook.
    """The damage campaign's outcome counts, when it ran (see tests/sources/damage.py)."""
    from tests.sources.damage import report_lines
    for line in report_lines():
        terminalreporter.write_line(line)


@pytest.fixture
def spied(monkeypatch) -> list[bool]:
    """Whether each column chunk was read by the page reader (True) or left to pyarrow."""
    calls: list[bool] = []
    spans = parquet_pages.binary_spans

    def recorded(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = spans(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(parquet, 'binary_spans', recorded)
    return calls
