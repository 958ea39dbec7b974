"""``streaming.base.*`` names behave as the reference's: same inputs, same results (oracle)."""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np
import pytest

from tests.compat.oracle import run_reference_code

WORLDS = [(1, 1, 1, 0), (2, 4, 2, 5), (2, 4, 2, 15), (3, 2, 1, 4), (4, 8, 3, 50)]
BYTES = ['1', '1b', '3kb', '2.5mb', '1gb', '7TB', 1024, 0]
COUNTS = ['1', '10k', '3.5m', '2b', '1t', 500, '64M']


@pytest.fixture(scope='module')
def ref() -> dict[str, Any]:
    """One reference process computes everything the tests compare against."""
    code = f"""
import numpy as np
from streaming.base.util import bytes_to_int, number_abbrev_to_int, get_list_arg
from streaming.base.hashing import get_hash, get_hashes
import streaming.base.compression as C
import streaming.base.format.mds.encodings as E
from streaming.base.format.xsv.encodings import xsv_encode, xsv_decode, is_xsv_encoding
from streaming.base.format.json.encodings import is_json_encoding
from streaming.base.world import World
from streaming.base.spanner import Spanner
from streaming.base.shuffle.py1e import divide_spans
from streaming.base.sampling import get_sampling
from streaming.base.storage import CloudDownloader, CloudUploader
out = {{}}
out['bytes'] = [bytes_to_int(x) for x in {BYTES!r}]
out['counts'] = [number_abbrev_to_int(x) for x in {COUNTS!r}]
out['list'] = [get_list_arg(x) for x in ['a,b', 'x', '']]
out['hashes'] = {{a: get_hash(a, b'compat') for a in sorted(get_hashes())}}
out['compressions'] = sorted(C.get_compressions())
out['families'] = {{cls.__name__: [cls.extension, getattr(cls, 'levels', None),
                                   [k for k, _ in cls.each()]]
                    for cls in [C.Brotli, C.Bzip2, C.Gzip, C.Snappy, C.Zstandard]}}
out['zipped'] = {{k: c.compress(b'compat ' * 50).hex() for k, c in C.Zstandard.each()
                  if k in ('zstd', 'zstd:7')}}
out['encoding_classes'] = {{k: v.__name__ for k, v in E._encodings.items()}}
out['encoded'] = [E.mds_encode(e, v).hex() for e, v in [('int', 7), ('str', 'hé'),
                  ('uint16', 9), ('float32', 1.5), ('str_float', 2.25), ('json', {{'a': [1]}})]]
out['nd'] = E.mds_encode('ndarray', np.arange(6, dtype=np.int16).reshape(2, 3)).hex()
out['xsv'] = [xsv_encode('float', 1.5), xsv_decode('int', '12'), is_xsv_encoding('foo'),
              is_json_encoding('str')]
out['worlds'] = [World(*w).to_json() for w in {WORLDS!r}]
out['replicated'] = [World(*w).replicate(2).to_json() for w in {WORLDS!r}[1:]]
sp = Spanner(np.array([3, 5, 2, 0, 4]), span_size=2)
out['spanner'] = [list(map(int, sp[i])) for i in range(14)]
out['spans'] = [divide_spans([(0, 3), (3, 10), (10, 12)], 12, n) for n in (1, 2, 5, 12)]
out['sampling'] = [get_sampling(np.array([3, 5, 2]), c, 1, 7, 0, True).tolist()
                   for c in (10, 20, 30)]
def kind(url):
    try:
        return type(CloudDownloader.get(url)).__name__
    except ImportError:  # The reference builds the SDK client here; its env lacks some SDKs.
        return None
out['downloaders'] = [kind(u) for u in
                      [None, '/tmp/x', 's3://b/k', 'gs://b/k', 'oci://b@n/k', 'azure://a/c/k',
                       'azure-dl://f/k', 'hf://datasets/o/r/k', 'dbfs:/Volumes/a/b',
                       'dbfs:/a/b', 'sftp://h/p']]
emit(out)
"""
    return run_reference_code(code)[0]


def test_util_parsing(ref: dict[str, Any]) -> None:
    from streaming.base.util import bytes_to_int, get_list_arg, number_abbrev_to_int
    assert [bytes_to_int(x) for x in BYTES] == ref['bytes']
    assert [number_abbrev_to_int(x) for x in COUNTS] == ref['counts']
    assert [get_list_arg(x) for x in ['a,b', 'x', '']] == ref['list']


def test_hashes(ref: dict[str, Any]) -> None:
    from streaming.base.hashing import get_hash, get_hashes
    assert sorted(get_hashes()) == sorted(ref['hashes'])
    assert {a: get_hash(a, b'compat') for a in ref['hashes']} == ref['hashes']


def test_compression_classes(ref: dict[str, Any]) -> None:
    import streaming.base.compression as C
    assert sorted(C.get_compressions()) == ref['compressions']
    for cls in [C.Brotli, C.Bzip2, C.Gzip, C.Snappy, C.Zstandard]:
        extension, levels, each = ref['families'][cls.__name__]
        assert cls.extension == extension
        assert getattr(cls, 'levels', None) == levels
        assert [k for k, _ in cls.each()] == each
    # Both compress 'zstd' and 'zstd:7' to the same bytes.
    for algo, hex_data in ref['zipped'].items():
        codec = dict(C.Zstandard.each())[algo]
        assert codec.compress(b'compat ' * 50).hex() == hex_data
        assert codec.decompress(bytes.fromhex(hex_data)) == b'compat ' * 50


def test_mds_encoding_classes_have_the_reference_names(ref: dict[str, Any]) -> None:
    import streaming.base.format.mds.encodings as E
    for key, class_name in ref['encoding_classes'].items():
        assert getattr(E, class_name) is E._encodings[key], (key, class_name)


def test_mds_encode_same_bytes(ref: dict[str, Any]) -> None:
    import streaming.base.format.mds.encodings as E
    values = [('int', 7), ('str', 'hé'), ('uint16', 9), ('float32', 1.5), ('str_float', 2.25),
              ('json', {'a': [1]})]
    assert [E.mds_encode(e, v).hex() for e, v in values] == ref['encoded']
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    assert E.mds_encode('ndarray', array).hex() == ref['nd']
    assert (E.mds_decode('ndarray', bytes.fromhex(ref['nd'])) == array).all()


def test_text_encodings(ref: dict[str, Any]) -> None:
    from streaming.base.format.json.encodings import is_json_encoded, is_json_encoding
    from streaming.base.format.xsv.encodings import is_xsv_encoding, xsv_decode, xsv_encode
    assert [xsv_encode('float', 1.5), xsv_decode('int', '12'), is_xsv_encoding('foo'),
            is_json_encoding('str')] == ref['xsv']
    assert is_json_encoded('int', 3)
    with pytest.raises(AttributeError):  # A wrong type is refused, as by the reference.
        is_json_encoded('float', 3)
    with pytest.raises(KeyError):  # Unknown encodings are a KeyError in both.
        xsv_encode('foo', 1)


def test_world(ref: dict[str, Any]) -> None:
    from streaming.base.world import World
    assert [World(*w).to_json() for w in WORLDS] == ref['worlds']
    assert [World(*w).replicate(2).to_json() for w in WORLDS[1:]] == ref['replicated']
    detected = World.detect()
    assert (detected.num_nodes, detected.worker, detected.is_leader) == (1, 0, True)


def test_spanner_and_divide_spans(ref: dict[str, Any]) -> None:
    from streaming.base.shuffle.py1e import divide_spans
    from streaming.base.spanner import Spanner
    spanner = Spanner(np.array([3, 5, 2, 0, 4]), span_size=2)
    assert [list(spanner[i]) for i in range(14)] == ref['spanner']
    with pytest.raises(IndexError):
        spanner[14]
    got = [divide_spans([(0, 3), (3, 10), (10, 12)], 12, n) for n in (1, 2, 5, 12)]
    assert [[list(map(list, spans)), list(map(list, parts))] for spans, parts in got] == \
        ref['spans']


def test_sampling_whole_multiples(ref: dict[str, Any]) -> None:
    from streaming.base.sampling import get_sampling
    # Whole repeats of the stream are deterministic; partial draws use our own random streams.
    assert [get_sampling(np.array([3, 5, 2]), c, 1, 7, 0, True).tolist()
            for c in (10, 20, 30)] == ref['sampling']
    partial = get_sampling(np.array([3, 5, 2]), 7, 1, 7, 0, True)
    assert partial.sum() == 7 and (partial <= [3, 5, 2]).all()


def test_downloader_classes(ref: dict[str, Any]) -> None:
    from streaming.base.storage import CloudDownloader
    urls = [None, '/tmp/x', 's3://b/k', 'gs://b/k', 'oci://b@n/k', 'azure://a/c/k',
            'azure-dl://f/k', 'hf://datasets/o/r/k', 'dbfs:/Volumes/a/b', 'dbfs:/a/b',
            'sftp://h/p']
    for url, expected in zip(urls, ref['downloaders']):
        if expected is not None:
            assert type(CloudDownloader.get(url)).__name__ == expected, url
    with pytest.raises(ValueError):
        CloudDownloader.get('nosuchscheme://b/k')


def test_partitions_match_without_padding() -> None:
    """Where no padding is involved the partition is the reference's, sample for sample."""
    from streaming.base.partition import get_partitions
    cases = [c for c in itertools.product([48, 96], [1, 2, 4], [1, 2], [1, 2], [1, 2], [1, 4],
                                          [0, 8])
             if c[1] % c[2] == 0 or c[2] % c[1] == 0]
    ref = run_reference_code(f"""
from streaming.base.partition import get_partitions
for c in {cases!r}:
    emit(get_partitions('orig', *c[:-1], drop_first=c[-1]).tolist())
""")
    for case, expected in zip(cases, ref):
        got = get_partitions('orig', *case[:-1], drop_first=case[-1]).tolist()
        assert got == expected, case


def test_list_objects_and_direct_download(tmp_path: Any) -> None:
    from streaming.base.storage import CloudDownloader, CloudUploader, LocalUploader
    src = tmp_path / 'src'
    (src / 'sub').mkdir(parents=True)
    (src / 'a.txt').write_text('a')
    (src / 'sub' / 'b.txt').write_text('b')
    uploader = CloudUploader.get(str(src), exist_ok=True)
    assert isinstance(uploader, LocalUploader)
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'a.txt').write_text('a')
    (out / 'sub').mkdir()
    (out / 'sub' / 'b.txt').write_text('b')
    # Without a remote, the local directory is listed (absolute paths, as the reference).
    lister = CloudUploader.get(str(tmp_path / 'fresh'))
    lister.local = str(out)
    assert lister.list_objects() == [str(out / 'a.txt'), str(out / 'sub' / 'b.txt')]
    assert lister.list_objects('sub') == [str(out / 'sub' / 'b.txt')]
    target = tmp_path / 'x' / 'y.txt'
    CloudDownloader.direct_download(str(out / 'a.txt'), str(target))
    assert target.read_text() == 'a'
    with pytest.raises(FileNotFoundError):
        CloudDownloader.get(str(out)).download(str(out / 'zz'), str(tmp_path / 'z'))
    assert not os.path.exists(tmp_path / 'z')
