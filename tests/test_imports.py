"""Import paths: the reference's names resolve, custom encodings plug in, import stays light."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import streaming
from tests.unit_helpers import mds_round_trip, read_index

HEAVY = ['torch', 'boto3', 'google', 'azure', 'oci', 'pyspark', 'transformers', 'torchvision',
         'PIL']


def test_top_level_names() -> None:
    from streaming import CSVWriter, JSONWriter, LocalDataset, MDSWriter, TSVWriter, XSVWriter
    assert isinstance(streaming.__version__, str) and streaming.__version__
    for cls in [CSVWriter, JSONWriter, LocalDataset, MDSWriter, TSVWriter, XSVWriter]:
        assert isinstance(cls, type)
        assert cls.__name__ in dir(streaming)
    with pytest.raises(AttributeError):
        streaming.NoSuchThing  # noqa: B018


def test_streaming_base_names_are_the_same_objects() -> None:
    import streaming.base as base
    for name in ['CSVWriter', 'JSONWriter', 'LocalDataset', 'MDSWriter', 'TSVWriter', 'XSVWriter']:
        assert getattr(base, name) is getattr(streaming, name)
    from streaming.base import LocalDataset, MDSWriter  # noqa: F401
    from streaming.base.format import JSONWriter, reader_from_json  # noqa: F401
    from streaming.base.format.mds import MDSReader
    from streaming.base.format.mds import MDSWriter as MDSWriter2
    assert MDSWriter2 is MDSWriter
    assert MDSReader.__name__ == 'MDSReader'


def test_streaming_base_compression_and_hashing() -> None:
    from streaming.base.compression import compress, decompress, get_compressions
    from streaming.base.hashing import get_hash, get_hashes
    assert decompress('zstd', compress('zstd', b'abc' * 100)) == b'abc' * 100
    assert 'zstd:7' in get_compressions()
    assert 'xxh64' in get_hashes() and len(get_hash('sha1', b'')) == 40


def test_streaming_base_util() -> None:
    from streaming.base import util
    from streaming.base.util import (
        bytes_to_int,
        clean_stale_shared_memory,
        get_list_arg,
        merge_index,
        number_abbrev_to_int,
        retry,
    )
    assert bytes_to_int('2kb') == 2048
    assert number_abbrev_to_int('3k') == 3000
    assert get_list_arg('a,b') == ['a', 'b']
    assert callable(retry(OSError)) and callable(merge_index)
    assert clean_stale_shared_memory() is None
    for name in ['bytes_to_int', 'clean_stale_shared_memory', 'get_list_arg', 'merge_index',
                 'number_abbrev_to_int', 'retry']:
        assert name in util.__all__


def test_merge_index_via_base_util(tmp_path: Any) -> None:
    from streaming.base.util import merge_index
    mds_round_trip(str(tmp_path / 'p0'), {'a': 'int'}, [{'a': 1}])
    mds_round_trip(str(tmp_path / 'p1'), {'a': 'int'}, [{'a': 2}])
    merge_index(str(tmp_path))
    assert [s['raw_data']['basename'] for s in read_index(str(tmp_path))['shards']] == \
        ['p0/shard.00000.mds', 'p1/shard.00000.mds']


def test_encodings_module_paths() -> None:
    old = importlib.import_module('streaming.base.format.mds.encodings')
    new = importlib.import_module('streaming.format.mds.encodings')
    assert old._encodings is new._encodings
    assert old.Encoding is new.Encoding
    for name in ['mds_encode', 'mds_decode', 'get_mds_encodings', 'is_mds_encoding',
                 'get_mds_encoded_size', 'is_mds_encoding_safe']:
        assert getattr(old, name) is getattr(new, name)


def test_custom_encoding_registered_through_base_path(tmp_path: Any) -> None:
    from streaming.base.format.mds.encodings import Encoding, _encodings

    class Complex128(Encoding):
        """A complex number as two float64s."""
        size = 16

        def encode(self, obj: complex) -> bytes:
            return np.array([obj.real, obj.imag], np.float64).tobytes()

        def decode(self, data: bytes) -> complex:
            real, imag = np.frombuffer(data, np.float64)
            return complex(real, imag)

    class Reversed(Encoding):
        """A str stored backwards (variable size)."""

        def encode(self, obj: str) -> bytes:
            return obj[::-1].encode()

        def decode(self, data: bytes) -> str:
            return bytes(data).decode()[::-1]

    _encodings['complex128'] = Complex128
    _encodings['reversed'] = Reversed
    try:
        root = str(tmp_path)
        values = [complex(1, -2), complex(0.5, 1e300)]
        got = mds_round_trip(root, {'z': 'complex128', 'r': 'reversed'},
                             [{'z': v, 'r': f'abc{i}'} for i, v in enumerate(values)])
        assert [s['z'] for s in got] == values
        assert [s['r'] for s in got] == ['abc0', 'abc1']
        shard, = read_index(root)['shards']
        assert shard['column_encodings'] == ['reversed', 'complex128']
        assert shard['column_sizes'] == [None, 16]
        with open(tmp_path / shard['raw_data']['basename'], 'rb') as f:
            assert b'0cba' in f.read()
    finally:
        del _encodings['complex128'], _encodings['reversed']


def _modules_after(code: str) -> list[str]:
    script = f'{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))'
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize('code', [
    'import streaming',
    'import streaming.base',
    'from streaming import MDSWriter, JSONWriter, CSVWriter',
    'import streaming.base.util',
    'import streaming.base.format.mds.encodings',
    # The CLI's index/inspect/validate of Parquet/JSONL files (each CLI run paid torch's import).
    'import streaming.sources.sidecar',
    'from streaming.cli.main import build_parser; build_parser()',
])
def test_import_is_light(code: str) -> None:
    loaded = _modules_after(code)
    assert 'streaming' in loaded
    heavy = [m for m in loaded if m.split('.')[0] in HEAVY]
    assert heavy == []


def test_the_source_stream_is_registered_whatever_is_imported_first() -> None:
    """``stream_name='source'`` works after importing just StreamingDataset (the registration
    is a side effect of ``streaming.dataset.source_stream``, which the package imports eagerly)."""
    code = ('from streaming.dataset.dataset import StreamingDataset\n'
            'from streaming.dataset.stream import streams_registry\n'
            'print("SOURCE", streams_registry.get("source").__name__)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True).stdout
    assert 'SOURCE SourceStream' in out


def test_writing_mds_does_not_import_torch(tmp_path: Any) -> None:
    code = (f'from streaming import MDSWriter\n'
            f'with MDSWriter(columns={{"a": "int", "b": "str"}}, out={str(tmp_path)!r}, '
            f'compression="zstd", hashes=["xxh64"]) as w:\n'
            f'    w.write({{"a": 1, "b": "x"}})')
    loaded = _modules_after(code)
    assert not [m for m in loaded if m.split('.')[0] in HEAVY]
    assert read_index(str(tmp_path))['shards'][0]['samples'] == 1


def test_sorted_unique_is_np_unique() -> None:
    from streaming.util import sorted_unique
    rng = np.random.default_rng(0)
    for values in [np.array([], np.int64), np.array([3]), rng.integers(0, 9, 50),
                   rng.integers(-5, 5, (4, 6)).astype(np.int32)]:
        got, want = sorted_unique(values), np.unique(values)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_first_sample_does_not_import_numpy_ma(tmp_path: Any) -> None:
    """numpy.ma's import (slow on a cold, busy machine) is off the path to a sample."""
    from tests.unit_helpers import write_mds
    write_mds(str(tmp_path), {'a': 'int'}, [{'a': i} for i in range(300)], size_limit=200)
    code = (f'from streaming import StreamingDataset\n'
            f'for algo in ["py1e", "py1b", "py1br", "py1s", "py2s", "naive", "index"]:\n'
            f'    ds = StreamingDataset(local={str(tmp_path)!r}, batch_size=4, shuffle=True,\n'
            f'                          shuffle_algo=algo, num_canonical_nodes=2)\n'
            f'    assert len(list(ds)) == 300')
    assert 'numpy.ma' not in _modules_after(code)
