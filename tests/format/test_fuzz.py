"""Fuzzing index.json fields and shard bytes, for every format and compression.

Whatever is mutated, reading every sample must give the right samples or one of the library's
typed errors (``StreamingError``), within a bounded time. Never a bare ``KeyError``,
``OverflowError``, ``struct.error``, codec error or numpy error from deep inside a reader.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import CSVWriter, JSONWriter, LocalDataset, MDSWriter, TSVWriter, XSVWriter
from streaming.errors import StreamingError
from tests.unit_helpers import time_limit

FORMATS = ['mds', 'json', 'csv', 'tsv', 'xsv']
COMPRESSIONS = [None, 'gz', 'bz2', 'zstd', 'br', 'snappy']
MDS_COLUMNS = {'i': 'int', 's': 'str', 'f': 'float32', 'a': 'ndarray', 'j': 'json',
               'n': 'ndarray:int16:2', 'b': 'bytes', 'u': 'uint8'}
TEXT_COLUMNS = {'i': 'int', 's': 'str', 'f': 'float'}
SECONDS_PER_EXAMPLE = 10
# More examples, and random ones, for a longer hunt: STREAMING_FUZZ_EXAMPLES=5000.
EXAMPLES = int(os.environ.get('STREAMING_FUZZ_EXAMPLES', '250'))
FIXED = 'STREAMING_FUZZ_EXAMPLES' not in os.environ
OUTCOMES: Counter = Counter()  # (test, outcome) -> count, printed at the end of the module.


def _samples(fmt: str) -> list[dict[str, Any]]:
    if fmt == 'mds':
        return [{'i': k, 's': f'é{k}', 'f': k / 4, 'a': np.arange(k + 1, dtype=np.int32),
                 'j': {'k': [k]}, 'n': np.array([k, -k], np.int16), 'b': bytes([k]) * k,
                 'u': k} for k in range(7)]
    return [{'i': k, 's': f'é{k}', 'f': k / 4} for k in range(7)]


def _write(root: str, fmt: str, compression: str | None) -> None:
    cls = {'mds': MDSWriter, 'json': JSONWriter, 'csv': CSVWriter, 'tsv': TSVWriter,
           'xsv': XSVWriter}[fmt]
    extra = {'separator': '|'} if fmt == 'xsv' else {}
    columns = MDS_COLUMNS if fmt == 'mds' else TEXT_COLUMNS
    with cls(columns=columns, out=root, compression=compression, size_limit=150,
             hashes=['xxh64'], **extra) as writer:
        for sample in _samples(fmt):
            writer.write(sample)


@pytest.fixture(scope='module')
def datasets() -> Iterator[dict[tuple[str, str | None], str]]:
    """One small multi-shard dataset per (format, compression), never modified."""
    base = tempfile.mkdtemp(prefix='fuzz-')
    out = {}
    for fmt in FORMATS:
        for compression in COMPRESSIONS:
            root = os.path.join(base, f'{fmt}-{compression}')
            _write(root, fmt, compression)
            out[(fmt, compression)] = root
    yield out
    shutil.rmtree(base)
    print('\nfuzz outcomes:', dict(sorted(OUTCOMES.items())))


_baseline: dict[tuple[str, str | None], list[dict[str, Any]]] = {}


def _expected(datasets: dict, fmt: str, compression: str | None) -> list[dict[str, Any]]:
    """The samples as read from the untouched dataset (checked against what was written)."""
    key = (fmt, compression)
    if key not in _baseline:
        root = _copy(datasets[key], tempfile.mkdtemp(prefix='fuzz-base-'))
        dataset = LocalDataset(root)
        got = [dataset[i] for i in range(len(dataset))]
        written = _samples(fmt)
        assert len(got) == len(written)
        for g, w in zip(got, written):
            assert g.keys() == w.keys() and g['i'] == w['i'] and g['s'] == w['s']
        _baseline[key] = got
        shutil.rmtree(os.path.dirname(root))
    return _baseline[key]


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and
                    x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _read_or_refuse(root: str, expected: list[dict[str, Any]], **kwargs: Any) -> str:
    """'right' if every sample reads back as written, 'refused' on a typed error, else 'wrong'.

    Any other exception fails the test.
    """
    with time_limit(SECONDS_PER_EXAMPLE):
        try:
            dataset = LocalDataset(root, **kwargs)
            got = [dataset[i] for i in range(len(dataset))]
        except StreamingError:
            return 'refused'
    return 'right' if len(got) == len(expected) and all(map(_equal, got, expected)) else 'wrong'


def _copy(source: str, tmp: str) -> str:
    root = os.path.join(tmp, 'ds')
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(source, root)
    return root


# ---- index.json fields ------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
    st.sampled_from(['', '..', '/etc/passwd', 'a\0b', 'shard.00000.mds', 'shard.00001.mds',
                     'mds', 'json', 'csv', 'zstd', 'pkl', 'int', 'str', 'float32', 'xxh64',
                     '../index.json', 'x/../../y', '\n', ',']) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) |
    st.dictionaries(st.sampled_from(['basename', 'bytes', 'hashes', 'xxh64', 'a', 'i']),
                    children, max_size=4),
    max_leaves=8)

SHARD_KEYS = ['samples', 'format', 'version', 'compression', 'hashes', 'size_limit', 'raw_data',
              'zip_data', 'raw_meta', 'zip_meta', 'column_names', 'column_encodings',
              'column_sizes', 'columns', 'newline', 'separator']
FILE_KEYS = ['basename', 'bytes', 'hashes']


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside a JSON object."""
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out.extend(_paths(value, prefix + (i,)))
    return out


@st.composite
def index_edits(draw: Any) -> tuple:
    fmt = draw(st.sampled_from(FORMATS))
    compression = draw(st.sampled_from(COMPRESSIONS))
    edits = draw(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(['set', 'del', 'add']),
                                    JSON_VALUES, st.sampled_from(SHARD_KEYS + FILE_KEYS)),
                          min_size=1, max_size=3))
    return fmt, compression, edits


def _apply(obj: dict[str, Any], edits: list[tuple]) -> None:
    for pick, action, value, key in edits:
        paths = _paths(obj)
        path = paths[pick % len(paths)]
        parent = obj
        for part in path[:-1]:
            parent = parent[part]
        if action == 'add' and isinstance(parent, dict):
            parent[key] = value
        elif not path:
            continue
        elif action == 'del' and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value


@settings(max_examples=EXAMPLES, deadline=None, derandomize=FIXED,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(index_edits())
def test_fuzz_index_fields(datasets: dict, tmp_path_factory: Any, case: tuple) -> None:
    fmt, compression, edits = case
    tmp = str(tmp_path_factory.getbasetemp())
    root = _copy(datasets[(fmt, compression)], tmp)
    path = os.path.join(root, 'index.json')
    with open(path) as f:
        obj = json.load(f)
    _apply(obj, edits)
    with open(path, 'w') as f:
        json.dump(obj, f)
    expected = _expected(datasets, fmt, compression)
    outcome = _read_or_refuse(root, expected)
    OUTCOMES['index', outcome] += 1
    # An edit may leave the data intact (a hash value, size_limit, an extra key), or must be
    # refused; a different sample set is allowed only if the edit dropped whole shards and kept
    # the rest consistent, which the checks below tell apart.
    if outcome == 'wrong':
        dataset = LocalDataset(root)
        got = [dataset[i] for i in range(len(dataset))]
        # Every sample served must be one that was written (never garbage).
        assert all(any(_equal(g, e) for e in expected) for g in got), (edits, got)


# ---- shard bytes ---------------------------------------------------------------------------

@st.composite
def byte_edits(draw: Any) -> tuple:
    fmt = draw(st.sampled_from(FORMATS))
    compression = draw(st.sampled_from(COMPRESSIONS))
    file_pick = draw(st.integers(0, 100))
    kind = draw(st.sampled_from(['flip', 'set', 'truncate', 'append', 'splice']))
    where = draw(st.integers(0, 10**6))
    value = draw(st.binary(min_size=1, max_size=8))
    return fmt, compression, file_pick, kind, where, value


def _mutate(data: bytes, kind: str, where: int, value: bytes) -> bytes:
    n = max(len(data), 1)
    pos = where % n
    if kind == 'flip':
        return data[:pos] + bytes([data[pos] ^ (value[0] or 1)]) + data[pos + 1:]
    if kind == 'set':
        return data[:pos] + value + data[pos + len(value):]
    if kind == 'truncate':
        return data[:pos]
    if kind == 'append':
        return data + value
    return data[:pos] + value + data[pos:]  # splice: insert bytes


@settings(max_examples=EXAMPLES, deadline=None, derandomize=FIXED,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(byte_edits())
def test_fuzz_shard_bytes(datasets: dict, tmp_path_factory: Any, case: tuple) -> None:
    fmt, compression, file_pick, kind, where, value = case
    tmp = str(tmp_path_factory.getbasetemp())
    root = _copy(datasets[(fmt, compression)], tmp)
    names = sorted(n for n in os.listdir(root) if n.startswith('shard.'))
    if compression:
        # Only the compressed copies are read (the raw files are made from them).
        for name in names:
            if not name.endswith(compression):
                os.remove(os.path.join(root, name))
        names = sorted(n for n in os.listdir(root) if n.startswith('shard.'))
    path = os.path.join(root, names[file_pick % len(names)])
    with open(path, 'rb') as f:
        data = f.read()
    with open(path, 'wb') as f:
        f.write(_mutate(data, kind, where, value))
    expected = _expected(datasets, fmt, compression)
    outcome = _read_or_refuse(root, expected)
    OUTCOMES['bytes', kind, outcome] += 1
    # Without a checksum a changed payload byte may go unseen ('wrong'), but only typed errors
    # escape. With validate_hash, the data is right or refused.
    checked = _read_or_refuse(root, expected, validate_hash='xxh64')
    OUTCOMES['bytes+hash', kind, checked] += 1
    assert checked in ('right', 'refused'), (kind, outcome)
