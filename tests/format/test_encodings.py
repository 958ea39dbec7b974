"""MDS column encodings: every registered encoding round trips through MDSWriter + LocalDataset."""

from __future__ import annotations

import math
import os
from decimal import Decimal
from io import BytesIO
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from streaming import LocalDataset
from streaming.format.mds.encodings import (
    _encodings,
    get_mds_encoded_size,
    get_mds_encodings,
    is_mds_encoding,
    is_mds_encoding_safe,
    mds_decode,
    mds_encode,
)
from tests.unit_helpers import mds_round_trip, read_index, shard_files

# The 28 encoding names of the reference (mosaicml-streaming 0.13.0).
REFERENCE_ENCODINGS = {
    'bytes', 'str', 'int', 'ndarray', 'uint8', 'uint16', 'uint32', 'uint64', 'int8', 'int16',
    'int32', 'int64', 'float16', 'float32', 'float64', 'str_int', 'str_float', 'str_decimal',
    'pil', 'jpeg', 'jpeg_array', 'jpegarray', 'png', 'list[pil]', 'list[jpeg]', 'list[png]', 'pkl',
    'json'
}
SCALAR_DTYPES = ['uint8', 'uint16', 'uint32', 'uint64', 'int8', 'int16', 'int32', 'int64',
                 'float16', 'float32', 'float64']
NDARRAY_DTYPES = SCALAR_DTYPES


def _image(mode: str, size: tuple[int, int], seed: int) -> Image.Image:
    """A random-pixel image of the given mode."""
    rng = np.random.default_rng(seed)
    length = len(Image.new(mode, size).tobytes())
    return Image.frombytes(mode, size, rng.integers(0, 256, length, dtype=np.uint8).tobytes())


def _smooth_image(size: tuple[int, int]) -> Image.Image:
    """A gradient image: JPEG keeps it close to the original."""
    w, h = size
    x = np.linspace(0, 255, w, dtype=np.float64)[None, :].repeat(h, 0)
    y = np.linspace(0, 255, h, dtype=np.float64)[:, None].repeat(w, 1)
    rgb = np.stack([x, y, (x + y) / 2], axis=-1).astype(np.uint8)
    return Image.fromarray(rgb, 'RGB')


def _jpeg_bytes(image: Image.Image) -> bytes:
    out = BytesIO()
    image.save(out, format='JPEG', quality=90)
    return out.getvalue()


def _pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert('RGB') if image.mode == 'P' else image)


def _assert_same_image(got: Any, want: Image.Image) -> None:
    assert isinstance(got, Image.Image)
    assert got.size == want.size
    assert got.mode == want.mode
    assert got.tobytes() == want.tobytes()


def _assert_close_image(got: Any, want: Image.Image) -> None:
    """A lossy (JPEG) copy: same size, and pixels close on average."""
    assert isinstance(got, Image.Image)
    assert got.size == want.size
    diff = np.abs(np.asarray(got.convert('RGB'), np.int16) - np.asarray(want, np.int16))
    assert diff.mean() < 4


RGB = _image('RGB', (7, 5), 1)
GRAY = _image('L', (3, 9), 2)
RGBA = _image('RGBA', (4, 4), 3)
SMOOTH = _smooth_image((32, 24))
SMOOTH2 = _smooth_image((16, 40))


def _check_equal_type(want: Any) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        assert type(got) is type(want)
        assert got == want
    return check


def _check_images(want: list[Image.Image], lossless: bool) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            (_assert_same_image if lossless else _assert_close_image)(g, w)
    return check


def _check_jpeg_array(want: list[bytes]) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same_image(g, Image.open(BytesIO(w)))
    return check


def _check_array(want: np.ndarray) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert np.array_equal(got, want)
    return check


PICKLED = {'a': [1, (2, 3)], 'b': {4, 5}, 'c': Decimal('1.5'), 'd': None}
JSONED = {'a': [1, 2.5, None, 'x', True], 'b': {'c': {'d': []}}, 'ü': 'ñ'}
JPEGS = [_jpeg_bytes(SMOOTH), _jpeg_bytes(SMOOTH2)]

# encoding -> (value, check on the decoded value)
CASES: dict[str, tuple[Any, Callable[[Any], None]]] = {
    'bytes': (b'\x00\xff\x10abc\x00', _check_equal_type(b'\x00\xff\x10abc\x00')),
    'str': ('héllo, wörld ✓ \x00 \n', _check_equal_type('héllo, wörld ✓ \x00 \n')),
    'int': (-(2**63), _check_equal_type(-(2**63))),
    'str_int': (12345678901234567890123, _check_equal_type(12345678901234567890123)),
    'str_float': (0.1, _check_equal_type(0.1)),
    'str_decimal': (Decimal('3.14159265358979323846264338327950288'),
                    _check_equal_type(Decimal('3.14159265358979323846264338327950288'))),
    'pil': (RGB, lambda got: _assert_same_image(got, RGB)),
    'png': (RGBA, lambda got: _assert_same_image(got, RGBA)),
    'jpeg': (SMOOTH, lambda got: _assert_close_image(got, SMOOTH)),
    'jpeg_array': (JPEGS, _check_jpeg_array(JPEGS)),
    'jpegarray': (JPEGS, _check_jpeg_array(JPEGS)),
    'list[pil]': ([RGB, GRAY, RGBA], _check_images([RGB, GRAY, RGBA], lossless=True)),
    'list[png]': ([GRAY, RGB], _check_images([GRAY, RGB], lossless=True)),
    'list[jpeg]': ([SMOOTH, SMOOTH2], _check_images([SMOOTH, SMOOTH2], lossless=False)),
    'pkl': (PICKLED, _check_equal_type(PICKLED)),
    'json': (JSONED, _check_equal_type(JSONED)),
    'ndarray': (np.arange(24, dtype=np.float32).reshape(2, 3, 4),
                _check_array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))),
}
for _name in SCALAR_DTYPES:
    _dtype = np.dtype(_name)
    _info = np.iinfo(_dtype) if _dtype.kind in 'iu' else np.finfo(_dtype)
    _value = _dtype.type(_info.max if _dtype.kind == 'u' else _info.min)
    CASES[_name] = (_value, _check_equal_type(_value))


def test_registry_has_every_reference_encoding() -> None:
    assert get_mds_encodings() == REFERENCE_ENCODINGS
    assert set(CASES) == REFERENCE_ENCODINGS
    for name in REFERENCE_ENCODINGS:
        assert is_mds_encoding(name)


@pytest.mark.parametrize('encoding', sorted(CASES))
def test_round_trip_every_encoding(tmp_path: Any, encoding: str) -> None:
    value, check = CASES[encoding]
    # A second sample of a different column value shows samples do not bleed into each other.
    samples = [{'x': value, 'n': 1}, {'x': value, 'n': 2}]
    got = mds_round_trip(str(tmp_path), {'x': encoding, 'n': 'int'}, samples)
    for sample, want_n in zip(got, [1, 2]):
        assert set(sample) == {'x', 'n'}
        assert sample['n'] == want_n
        check(sample['x'])


@pytest.mark.parametrize('name', SCALAR_DTYPES)
def test_scalar_encodings_decode_to_numpy_scalars(tmp_path: Any, name: str) -> None:
    dtype = np.dtype(name)
    if dtype.kind in 'iu':
        info = np.iinfo(dtype)
        values = [int(info.min), int(info.max), 0, 7]
    else:
        info = np.finfo(dtype)
        values = [float(info.min), float(info.max), 0.0, -1.5, float(info.tiny)]
    got = mds_round_trip(str(tmp_path), {'v': name}, [{'v': v} for v in values])
    for sample, value in zip(got, values):
        assert type(sample['v']) is dtype.type
        assert sample['v'] == dtype.type(value)
    # Scalars have a fixed size: no length entry, and the index says so.
    assert read_index(str(tmp_path))['shards'][0]['column_sizes'] == [dtype.itemsize]


def test_int_decodes_to_python_int(tmp_path: Any) -> None:
    values = [0, 1, -1, 2**63 - 1, -(2**63), True]
    got = mds_round_trip(str(tmp_path), {'v': 'int'}, [{'v': v} for v in values])
    assert [s['v'] for s in got] == [int(v) for v in values]
    assert all(type(s['v']) is int for s in got)


def test_float_nan_and_inf_round_trip(tmp_path: Any) -> None:
    values = [math.nan, math.inf, -math.inf]
    columns = {'f16': 'float16', 'f32': 'float32', 'f64': 'float64', 's': 'str_float'}
    got = mds_round_trip(str(tmp_path), columns,
                         [{'f16': v, 'f32': v, 'f64': v, 's': v} for v in values])
    for sample, value in zip(got, values):
        for key in columns:
            result = float(sample[key])
            assert (math.isnan(result) and math.isnan(value)) or result == value


@pytest.mark.parametrize('encoding,array', [
    ('ndarray', np.arange(6, dtype=np.int16).reshape(2, 3)),
    ('ndarray:int32', np.arange(12, dtype=np.int32).reshape(3, 4)),
    ('ndarray:int32:3,4', np.arange(12, dtype=np.int32).reshape(3, 4)),
    ('ndarray:float64:5', np.linspace(0, 1, 5)),
    ('ndarray:uint8:2,1,3', np.arange(6, dtype=np.uint8).reshape(2, 1, 3)),
    ('ndarray', np.zeros((300, 2), np.uint8)),  # A dimension over 255.
    ('ndarray', np.ones((1, 70000), np.int8)),  # A dimension over 65535.
    ('ndarray', np.asfortranarray(np.arange(20, dtype=np.float32).reshape(4, 5))),
    ('ndarray', np.arange(40, dtype=np.uint64).reshape(5, 8)[:, ::3]),  # Not contiguous.
])
def test_ndarray_variants(tmp_path: Any, encoding: str, array: np.ndarray) -> None:
    got = mds_round_trip(str(tmp_path), {'a': encoding}, [{'a': array}, {'a': array}])
    for sample in got:
        _check_array(np.ascontiguousarray(array))(sample['a'])


def test_ndarray_fixed_shape_is_fixed_size(tmp_path: Any) -> None:
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    mds_round_trip(str(tmp_path), {'a': 'ndarray:int32:3,4', 'b': 'ndarray:int32'},
                   [{'a': array, 'b': array}])
    assert read_index(str(tmp_path))['shards'][0]['column_sizes'] == [48, None]
    assert get_mds_encoded_size('ndarray:int32:3,4') == 48
    assert get_mds_encoded_size('ndarray:int32') is None
    assert get_mds_encoded_size('ndarray') is None


def test_jpeg_from_file_is_stored_verbatim(tmp_path: Any) -> None:
    path = tmp_path / 'photo.jpg'
    SMOOTH.save(path, format='JPEG', quality=75)
    original = path.read_bytes()
    out = str(tmp_path / 'ds')
    with Image.open(path) as image:
        got = mds_round_trip(out, {'x': 'jpeg'}, [{'x': image}])
    # Re-encoding would change pixels; the file's own bytes give exactly its pixels.
    _assert_same_image(got[0]['x'], Image.open(BytesIO(original)))
    with open(os.path.join(out, shard_files(out)[0]), 'rb') as f:
        assert original in f.read()


def test_empty_image_list_round_trips(tmp_path: Any) -> None:
    got = mds_round_trip(str(tmp_path), {'p': 'list[pil]', 'q': 'list[png]'},
                         [{'p': [], 'q': []}])
    assert got[0] == {'p': [], 'q': []}


def test_pil_keeps_mode(tmp_path: Any) -> None:
    images = [_image(mode, (5, 6), i) for i, mode in enumerate(['1', 'L', 'RGB', 'RGBA', 'CMYK'])]
    got = mds_round_trip(str(tmp_path), {'x': 'pil'}, [{'x': im} for im in images])
    for sample, image in zip(got, images):
        _assert_same_image(sample['x'], image)


def test_bytes_value_is_stored_as_is_for_any_encoding(tmp_path: Any) -> None:
    # As in the reference: already-encoded bytes skip the encoder.
    payload = b'ok'
    got = mds_round_trip(str(tmp_path), {'s': 'str', 'j': 'json'},
                         [{'s': payload, 'j': b'[1, 2]'}])
    assert got[0] == {'s': 'ok', 'j': [1, 2]}


def test_safety_flags() -> None:
    assert not is_mds_encoding_safe('pkl')
    for name in REFERENCE_ENCODINGS - {'pkl'}:
        assert is_mds_encoding_safe(name)
    assert is_mds_encoding_safe('ndarray:int32:2')


@pytest.mark.parametrize('name', ['nope', 'ndarray:bool', 'ndarray:int32:0', 'ndarray:int32:a,b',
                                  'str:utf8', 'ndarray::3', 'list[gif]', ''])
def test_malformed_encodings_are_not_encodings(name: str) -> None:
    assert not is_mds_encoding(name)


def test_every_encoding_is_registered_as_a_class() -> None:
    # The reference's extension point: a table of Encoding subclasses.
    from streaming.format.mds.encodings import Encoding
    for name, cls in _encodings.items():
        assert isinstance(cls, type) and issubclass(cls, Encoding), name


# ---- property tests: encode/decode directly ----------------------------------------------------

def _same_scalar(a: Any, b: Any) -> bool:
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_property_scalars(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(SCALAR_DTYPES))
    value = data.draw(hnp.from_dtype(np.dtype(name)))
    encoded = mds_encode(name, value)
    assert len(encoded) == np.dtype(name).itemsize
    decoded = mds_decode(name, encoded)
    assert type(decoded) is np.dtype(name).type
    assert _same_scalar(decoded, value)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_property_int(value: int) -> None:
    assert mds_decode('int', mds_encode('int', value)) == value


@settings(max_examples=200, deadline=None)
@given(st.integers())
def test_property_str_int(value: int) -> None:
    assert mds_decode('str_int', mds_encode('str_int', value)) == value


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False))
def test_property_str_float(value: float) -> None:
    assert mds_decode('str_float', mds_encode('str_float', value)) == value


@settings(max_examples=200, deadline=None)
@given(st.decimals(allow_nan=False))
def test_property_str_decimal(value: Decimal) -> None:
    decoded = mds_decode('str_decimal', mds_encode('str_decimal', value))
    assert decoded == value and str(decoded) == str(value)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_property_str(value: str) -> None:
    assert mds_decode('str', mds_encode('str', value)) == value


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_property_bytes(value: bytes) -> None:
    assert mds_decode('bytes', mds_encode('bytes', value)) == value


_ARRAYS = st.sampled_from(NDARRAY_DTYPES).flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=1, max_dims=5, min_side=1,
                                                         max_side=6)))


@settings(max_examples=200, deadline=None)
@given(_ARRAYS)
def test_property_ndarray(array: np.ndarray) -> None:
    dtype, shape = array.dtype.name, ','.join(map(str, array.shape))
    for encoding in ['ndarray', f'ndarray:{dtype}', f'ndarray:{dtype}:{shape}']:
        encoded = mds_encode(encoding, array)
        size = get_mds_encoded_size(encoding)
        assert size is None or size == len(encoded)
        decoded = mds_decode(encoding, encoded)
        assert decoded.dtype == array.dtype and decoded.shape == array.shape
        assert decoded.tobytes() == array.tobytes()
    # Fixing the dtype and shape in the encoding only ever makes values smaller.
    assert len(mds_encode(f'ndarray:{dtype}:{shape}', array)) == array.nbytes


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(_JSON)
def test_property_json(value: Any) -> None:
    assert mds_decode('json', mds_encode('json', value)) == value


# ---- property test: whole samples through the writer and LocalDataset -------------------------

_COLUMN_VALUES = {
    'str': st.text(max_size=30),
    'bytes': st.binary(max_size=30),
    'int': st.integers(-(2**63), 2**63 - 1),
    'json': _JSON,
    'str_int': st.integers(),
    'ndarray': _ARRAYS,
    **{name: hnp.from_dtype(np.dtype(name), allow_nan=False) for name in SCALAR_DTYPES},
}


@st.composite
def _datasets(draw: st.DrawFn) -> tuple[dict[str, str], list[dict[str, Any]]]:
    names = draw(st.lists(st.text('abcdefgh_', min_size=1, max_size=6), min_size=1, max_size=5,
                          unique=True))
    columns = {name: draw(st.sampled_from(sorted(_COLUMN_VALUES))) for name in names}
    samples = draw(st.lists(st.fixed_dictionaries({n: _COLUMN_VALUES[e] for n, e in
                                                  columns.items()}), min_size=1, max_size=8))
    return columns, samples


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(want, np.ndarray):
        return got.dtype == want.dtype and got.shape == want.shape and \
            got.tobytes() == want.tobytes()
    if isinstance(want, np.generic):
        return type(got) is type(want) and _same_scalar(got, want)
    return type(got) is type(want) and got == want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_datasets(), st.sampled_from([None, 200, 2000]))
def test_property_samples_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                     dataset: tuple[dict[str, str], list[dict[str, Any]]],
                                     size_limit: int | None) -> None:
    columns, samples = dataset
    root = str(tmp_path_factory.mktemp('prop'))
    got = mds_round_trip(root, columns, samples, size_limit=size_limit)
    for sample, want in zip(got, samples):
        assert set(sample) == set(want)
        for name in want:
            assert _same_value(sample[name], want[name]), (name, sample[name], want[name])
    assert isinstance(LocalDataset(root, allow_unsafe_types=True)[-1], dict)
