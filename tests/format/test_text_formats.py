"""JSON, CSV, TSV and XSV writers and readers: round trips, layout, newline and separators."""

from __future__ import annotations

import json
import os
import pickle
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import CSVWriter, JSONWriter, LocalDataset, TSVWriter, XSVWriter
from tests.unit_helpers import read_index, shard_files

COLUMNS = {'name': 'str', 'count': 'int', 'score': 'float'}


def _samples(n: int) -> list[dict[str, Any]]:
    return [{'name': f'item-{i} ünï', 'count': i * 1000 - 7, 'score': i / 7 - 3.25}
            for i in range(n)]


def _write(cls: type, root: str, samples: list[dict[str, Any]], **kwargs: Any) -> None:
    kwargs.setdefault('columns', COLUMNS)
    with cls(out=root, **kwargs) as writer:
        for sample in samples:
            writer.write(sample)


def _read_all(root: str) -> list[dict[str, Any]]:
    dataset = LocalDataset(root)
    return [dataset[i] for i in range(len(dataset))]


def _meta(path: str) -> tuple[list[int], dict[str, Any]]:
    """(offsets, config) of a split format's .meta file."""
    with open(path, 'rb') as f:
        data = f.read()
    (count,) = struct.unpack_from('<I', data)
    offsets = list(struct.unpack_from(f'<{count + 1}I', data, 4))
    return offsets, json.loads(data[4 + 4 * (count + 1):])


WRITERS = [
    (JSONWriter, {}),
    (JSONWriter, {'newline': '\r\n'}),
    (CSVWriter, {}),
    (CSVWriter, {'newline': '\r\n'}),
    (TSVWriter, {}),
    (XSVWriter, {'separator': '|'}),
    (XSVWriter, {'separator': '::', 'newline': ';;\n'}),
    (XSVWriter, {'separator': '\x1f', 'newline': '\x1e'}),
]


@pytest.mark.parametrize('cls,kwargs', WRITERS,
                         ids=[f'{c.__name__}-{i}' for i, (c, _) in enumerate(WRITERS)])
def test_round_trip(tmp_path: Any, cls: type, kwargs: dict[str, Any]) -> None:
    root = str(tmp_path)
    samples = _samples(120)
    _write(cls, root, samples, size_limit=800, **kwargs)
    got = _read_all(root)
    assert got == samples
    for sample in got:
        assert type(sample['name']) is str
        assert type(sample['count']) is int
        assert type(sample['score']) is float
    index = read_index(root)
    assert len(index['shards']) > 1
    for shard in index['shards']:
        assert shard['format'] == cls.format
        assert shard['newline'] == kwargs.get('newline', '\n')
        # Only sample bytes count toward the limit, not a CSV's header line (as in the reference).
        separator = kwargs.get('separator', {'csv': ',', 'tsv': '\t'}.get(cls.format))
        header = 0 if separator is None else len(
            separator.join(sorted(COLUMNS)) + kwargs.get('newline', '\n'))
        assert shard['raw_data']['bytes'] - header <= 800


@pytest.mark.parametrize('newline', ['\n', '\r\n', '<EOL>'])
def test_json_layout(tmp_path: Any, newline: str) -> None:
    root = str(tmp_path)
    samples = [{'name': 'a"b\nc', 'count': 1, 'score': 0.5}, {'name': '', 'count': -2,
                                                              'score': 1e300}]
    _write(JSONWriter, root, samples, newline=newline)
    shard, = read_index(root)['shards']
    assert shard['columns'] == COLUMNS
    assert 'column_names' not in shard
    with open(os.path.join(root, shard['raw_data']['basename']), 'rb') as f:
        data = f.read()
    lines = data.decode().split(newline)
    assert lines[-1] == ''
    assert [json.loads(line) for line in lines[:-1]] == samples
    # Each line is the sample dumped with sorted keys.
    assert lines[0] == json.dumps(samples[0], sort_keys=True)
    offsets, config = _meta(os.path.join(root, shard['raw_meta']['basename']))
    assert offsets[0] == 0 and offsets[-1] == len(data) == shard['raw_data']['bytes']
    assert config['newline'] == newline and config['format'] == 'json'
    assert _read_all(root) == samples


@pytest.mark.parametrize('cls,separator', [(CSVWriter, ','), (TSVWriter, '\t'),
                                           (XSVWriter, ' ; ')])
def test_xsv_layout(tmp_path: Any, cls: type, separator: str) -> None:
    root = str(tmp_path)
    samples = [{'name': 'x y', 'count': 3, 'score': 0.1}, {'name': '', 'count': 0, 'score': -2.0}]
    kwargs = {'separator': separator} if cls is XSVWriter else {}
    _write(cls, root, samples, **kwargs)
    shard, = read_index(root)['shards']
    assert shard['column_names'] == sorted(COLUMNS)
    assert shard['column_encodings'] == [COLUMNS[n] for n in sorted(COLUMNS)]
    # Only XSV records its separator; CSV and TSV imply it.
    if cls is XSVWriter:
        assert shard['separator'] == separator
    else:
        assert 'separator' not in shard
    with open(os.path.join(root, shard['raw_data']['basename'])) as f:
        text = f.read()
    lines = text.split('\n')
    assert lines[0] == separator.join(sorted(COLUMNS))
    assert lines[1] == separator.join(['3', 'x y', '0.1'])
    assert lines[2] == separator.join(['0', '', '-2.0'])
    assert lines[3:] == ['']
    offsets, _ = _meta(os.path.join(root, shard['raw_meta']['basename']))
    assert offsets == [len(lines[0]) + 1, len(lines[0]) + len(lines[1]) + 2, len(text)]
    assert _read_all(root) == samples


def test_floats_round_trip_exactly(tmp_path: Any) -> None:
    values = [0.1, 1 / 3, 1e-310, -1e300, 5e-324, 123456789.123456789, float('inf')]
    samples = [{'name': 'f', 'count': 0, 'score': v} for v in values]
    for cls in [JSONWriter, CSVWriter]:
        root = str(tmp_path / cls.__name__)
        if cls is JSONWriter:
            samples_here = samples[:-1]  # JSON has no infinity.
        else:
            samples_here = samples
        _write(cls, root, samples_here)
        assert [s['score'] for s in _read_all(root)] == [s['score'] for s in samples_here]


def test_big_ints_and_bools(tmp_path: Any) -> None:
    root = str(tmp_path)
    samples = [{'name': 'n', 'count': 2**70, 'score': 1.0}, {'name': 'n', 'count': -(2**70),
                                                            'score': 1.0}]
    _write(CSVWriter, root, samples)
    assert _read_all(root) == samples


def test_compressed_and_hashed_split_shards(tmp_path: Any) -> None:
    root = str(tmp_path)
    samples = _samples(300)
    _write(TSVWriter, root, samples, compression='bz2:3', hashes=['sha256'], size_limit=2000)
    names = shard_files(root)
    assert names and all(n.endswith('.bz2') for n in names)
    assert any(n.endswith('.tsv.meta.bz2') for n in names)
    assert _read_all(root) == samples


def test_text_writers_reject_binary_encodings(tmp_path: Any) -> None:
    for cls, kwargs in [(JSONWriter, {}), (CSVWriter, {}), (XSVWriter, {'separator': '|'})]:
        with pytest.raises(ValueError, match='blob'):
            cls(columns={'blob': 'bytes'}, out=str(tmp_path / cls.__name__), **kwargs)


def test_text_datasets_pickle(tmp_path: Any) -> None:
    for cls, kwargs in [(JSONWriter, {}), (TSVWriter, {}), (XSVWriter, {'separator': '|'})]:
        root = str(tmp_path / cls.__name__)
        _write(cls, root, _samples(10), compression='gz', **kwargs)
        dataset = LocalDataset(root)
        dataset[0]
        assert pickle.loads(pickle.dumps(dataset))[:] == _samples(10)


_TEXT_SAMPLE = st.fixed_dictionaries({
    'name': st.text(),
    'count': st.integers(),
    'score': st.floats(allow_nan=False, allow_infinity=False),
})


@settings(max_examples=50, deadline=None)
@given(st.lists(_TEXT_SAMPLE, max_size=20), st.sampled_from(['\n', '\r\n', '\x00']),
       st.integers(50, 500))
def test_property_json_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                  samples: list[dict[str, Any]], newline: str,
                                  size_limit: int) -> None:
    root = str(tmp_path_factory.mktemp('json'))
    _write(JSONWriter, root, samples, newline=newline, size_limit=size_limit)
    assert _read_all(root) == samples


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from([(',', '\n'), ('\t', '\r\n'), ('<>', '\n'), ('|', '$$'),
                                   ('||', '\n'), ('aba', 'xx')]))
def test_property_xsv_round_trip(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
                                 syntax: tuple[str, str]) -> None:
    """Whatever the writer accepts reads back exactly; what it cannot store, it rejects."""
    separator, newline = syntax
    text = st.text(alphabet=st.sampled_from('ab|<>$x\r\n\t,é'), max_size=8) | st.text()
    samples = data.draw(st.lists(st.fixed_dictionaries({
        'name': text, 'count': st.integers(), 'score': st.floats(allow_nan=False)}),
        max_size=20))
    root = str(tmp_path_factory.mktemp('xsv'))
    accepted = []
    with XSVWriter(columns=COLUMNS, separator=separator, newline=newline, out=root,
                   size_limit=300) as writer:
        for sample in samples:
            try:
                writer.write(sample)
            except ValueError as error:
                assert "'name'" in str(error)
                assert separator in sample['name'] or newline in sample['name'] or \
                    len(separator) > 1
            else:
                accepted.append(sample)
    assert _read_all(root) == accepted
