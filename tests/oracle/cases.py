"""Interop cases: for each, the writer, its arguments and a deterministic list of samples.

Standalone (numpy, Pillow, standard library): the reference's env imports this same file, so
both implementations write exactly the same samples.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np

ALL_HASHES = ['blake2b', 'blake2s', 'md5', 'sha1', 'sha224', 'sha256', 'sha384', 'sha3_224',
              'sha3_256', 'sha3_384', 'sha3_512', 'sha512', 'xxh128', 'xxh32', 'xxh3_128',
              'xxh3_64', 'xxh64']

SCALAR_COLUMNS = {
    'bytes': 'bytes', 'str': 'str', 'int': 'int', 'uint8': 'uint8', 'uint16': 'uint16',
    'uint32': 'uint32', 'uint64': 'uint64', 'int8': 'int8', 'int16': 'int16', 'int32': 'int32',
    'int64': 'int64', 'float16': 'float16', 'float32': 'float32', 'float64': 'float64',
    'str_int': 'str_int', 'str_float': 'str_float', 'str_decimal': 'str_decimal',
    'json': 'json', 'pkl': 'pkl', 'nd_any': 'ndarray', 'nd_dtype': 'ndarray:int32',
    'nd_fixed': 'ndarray:float32:3,4', 'nd_big': 'ndarray:uint16',
}
IMAGE_COLUMNS = {'pil': 'pil', 'jpeg': 'jpeg', 'png': 'png', 'list_pil': 'list[pil]',
                 'list_jpeg': 'list[jpeg]', 'list_png': 'list[png]', 'jpeg_array': 'jpeg_array',
                 'jpegarray': 'jpegarray'}
TEXT_COLUMNS = {'name': 'str', 'count': 'int', 'score': 'float'}


def _scalar_sample(rng: np.random.RandomState, i: int) -> dict[str, Any]:
    dtypes = ['uint8', 'int8', 'uint16', 'int16', 'float16', 'uint32', 'int32', 'float32',
              'uint64', 'int64', 'float64']
    ndim = 1 + i % 3
    shape = tuple(int(d) for d in rng.randint(1, 5, ndim))
    big = np.arange(300 + i, dtype=np.uint16).reshape(-1)
    sample = {
        'bytes': rng.bytes(i % 17),
        'str': 'sample ' + 'é☃' * (i % 4) + str(i),
        'int': int(rng.randint(-2**62, 2**62, dtype=np.int64)),
        'str_int': int(rng.randint(-10**9, 10**9)),
        'str_float': float(rng.randn()),
        'str_decimal': Decimal(f'{i}.{i % 7}01'),
        'json': {'z': i, 'a': [i, 'x' * (i % 3)], 'nested': {'k': None, 'b': i % 2 == 0}},
        'pkl': {'tuple': (i, str(i)), 'set_like': sorted({i, i + 1})},
        'nd_any': (rng.randn(*shape) * 100).astype(dtypes[i % len(dtypes)]),
        'nd_dtype': rng.randint(-1000, 1000, size=(i % 5) + 1).astype(np.int32),
        'nd_fixed': rng.randn(3, 4).astype(np.float32),
        'nd_big': big,
    }
    for name in ['uint8', 'uint16', 'uint32', 'uint64']:
        sample[name] = int(rng.randint(0, 200))
    for name in ['int8', 'int16', 'int32', 'int64']:
        sample[name] = int(rng.randint(-100, 100))
    for name in ['float16', 'float32', 'float64']:
        sample[name] = float(rng.randn())
    return sample


def _image_sample(rng: np.random.RandomState, i: int) -> dict[str, Any]:
    from io import BytesIO

    from PIL import Image

    def image(mode: str = 'RGB') -> Image.Image:
        h, w = 8 + i % 5, 10 + i % 3
        channels = {'RGB': 3, 'L': 1, 'RGBA': 4}[mode]
        pixels = rng.randint(0, 256, (h, w, channels), dtype=np.uint8)
        return Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels, mode)

    def jpeg_bytes() -> bytes:
        out = BytesIO()
        image().save(out, format='JPEG', quality=90)
        return out.getvalue()

    return {
        'pil': image(['RGB', 'L', 'RGBA'][i % 3]),
        'jpeg': image(),
        'png': image(['RGB', 'L', 'RGBA'][i % 3]),
        'list_pil': [image() for _ in range(i % 3 + 1)],
        'list_jpeg': [image() for _ in range(i % 2 + 1)],
        'list_png': [image('L') for _ in range(i % 3 + 1)],
        'jpeg_array': [jpeg_bytes() for _ in range(i % 2 + 1)],
        'jpegarray': [jpeg_bytes()],
    }


def _text_sample(rng: np.random.RandomState, i: int) -> dict[str, Any]:
    return {'name': f'row{i}' + 'x' * (i % 11), 'count': int(rng.randint(-10**6, 10**6)),
            'score': float(rng.randn())}


def _case(writer: str, columns: dict[str, str], make: Any, n: int, seed: int,
          **kwargs: Any) -> dict[str, Any]:
    return {'writer': writer, 'columns': columns, 'kwargs': kwargs, 'make': make, 'n': n,
            'seed': seed}


CASES: dict[str, dict[str, Any]] = {
    'mds_scalars': _case('MDSWriter', SCALAR_COLUMNS, _scalar_sample, 60, 1, size_limit=4096,
                         hashes=['sha1', 'xxh64']),
    'mds_images': _case('MDSWriter', IMAGE_COLUMNS, _image_sample, 12, 2, size_limit=1 << 14),
    'mds_all_hashes': _case('MDSWriter', {'text': 'str', 'id': 'int'}, lambda r, i: {
        'text': 'hash me ' * (i % 9), 'id': i}, 40, 3, hashes=ALL_HASHES, size_limit='1kb'),
    'mds_no_limit': _case('MDSWriter', {'id': 'int', 'data': 'bytes'}, lambda r, i: {
        'id': i, 'data': r.bytes(i)}, 50, 4, size_limit=None),
    **{f'mds_{name.replace(":", "_")}': _case(
        'MDSWriter', {'text': 'str', 'id': 'int', 'arr': 'ndarray:int16'}, lambda r, i: {
            'text': 'compress me ' * (i % 13), 'id': i,
            'arr': np.arange(i % 7 + 1, dtype=np.int16)}, 80, 5, compression=name,
        hashes=['md5', 'xxh3_64'], size_limit=2048)
       for name in ['br', 'br:5', 'bz2', 'bz2:3', 'gz', 'gz:1', 'snappy', 'zstd', 'zstd:7']},
    'json': _case('JSONWriter', TEXT_COLUMNS, _text_sample, 50, 6, size_limit=512,
                  hashes=['sha256']),
    'json_zstd': _case('JSONWriter', TEXT_COLUMNS, _text_sample, 50, 7, compression='zstd',
                       newline='\r\n'),
    'csv': _case('CSVWriter', TEXT_COLUMNS, _text_sample, 50, 8, size_limit=512),
    'tsv': _case('TSVWriter', TEXT_COLUMNS, _text_sample, 50, 9, compression='zstd:3'),
    'xsv': _case('XSVWriter', TEXT_COLUMNS, _text_sample, 50, 10, separator='|',
                 size_limit=700, hashes=['xxh32']),
}


def samples(name: str) -> list[dict[str, Any]]:
    """The samples of case ``name``, the same in every process."""
    case = CASES[name]
    rng = np.random.RandomState(case['seed'])
    return [case['make'](rng, i) for i in range(case['n'])]
