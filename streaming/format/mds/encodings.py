"""MDS column encodings: one class per encoding, all listed in the ``_encodings`` table.

An encoding turns one column value into bytes and back. ``size`` is the fixed byte length of
every encoded value, or None when it varies (the sample then stores a uint32 length for it).
Register your own encoding by subclassing ``Encoding`` and adding it to ``_encodings``.
Image encodings import Pillow on first use only.
"""

from __future__ import annotations

import json
import pickle
import struct
from decimal import Decimal
from io import BytesIO
from typing import Any

import numpy as np

from streaming.errors import ColumnTypeError, EncodingError

__all__ = ['Encoding', 'get_mds_encodings', 'is_mds_encoding', 'is_mds_encoding_safe',
           'mds_encode', 'mds_decode', 'get_mds_encoded_size', 'get_coder']


class Encoding:
    """Base class: encode one value to bytes and decode it back."""

    size: int | None = None  # Fixed encoded size in bytes, or None if it varies per value.

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    @staticmethod
    def _validate(obj: Any, kind: type | tuple[type, ...]) -> None:
        """Raise ``ColumnTypeError`` (a TypeError) unless ``obj`` is of type ``kind``."""
        if not isinstance(obj, kind):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            names = ' or '.join(k.__name__ for k in kinds)
            raise ColumnTypeError(f'expected {names}, got {type(obj).__name__}')


class Bytes(Encoding):
    """Raw bytes, stored as is."""

    def encode(self, obj: bytes) -> bytes:
        if not isinstance(obj, bytes):
            self._validate(obj, bytes)
        return obj

    def decode(self, data: bytes) -> bytes:
        return bytes(data)


class Str(Encoding):
    """UTF-8 text."""

    def encode(self, obj: str) -> bytes:
        if not isinstance(obj, str):
            self._validate(obj, str)
        return obj.encode('utf-8')

    def decode(self, data: bytes) -> str:
        return str(data, 'utf-8')


class Int(Encoding):
    """A Python int as a little-endian int64."""

    size = 8

    def encode(self, obj: int) -> bytes:
        if not isinstance(obj, int):
            self._validate(obj, int)
        return obj.to_bytes(8, 'little', signed=True)

    def decode(self, data: bytes) -> int:
        return int.from_bytes(data, 'little', signed=True)


class Scalar(Encoding):
    """A numpy scalar of a fixed dtype; values are cast with numpy's rules."""

    dtype: np.dtype

    def __init__(self) -> None:
        self.size = self.dtype.itemsize

    def encode(self, obj: Any) -> bytes:
        return self.dtype.type(obj).tobytes()

    def decode(self, data: bytes) -> np.generic:
        return np.frombuffer(data, self.dtype)[0]


def _scalar(name: str) -> type[Scalar]:
    attrs = {'dtype': np.dtype(name), '__doc__': f'numpy {name}.'}
    return type(name.capitalize(), (Scalar,), attrs)


class StrInt(Encoding):
    """An int written as its decimal text."""

    def encode(self, obj: int) -> bytes:
        self._validate(obj, int)
        return str(obj).encode('utf-8')

    def decode(self, data: bytes) -> int:
        return int(str(data, 'utf-8'))


class StrFloat(Encoding):
    """A float written as its shortest round-tripping text."""

    def encode(self, obj: float) -> bytes:
        self._validate(obj, float)
        return str(obj).encode('utf-8')

    def decode(self, data: bytes) -> float:
        return float(str(data, 'utf-8'))


class StrDecimal(Encoding):
    """A Decimal written as its text."""

    def encode(self, obj: Decimal) -> bytes:
        self._validate(obj, Decimal)
        return str(obj).encode('utf-8')

    def decode(self, data: bytes) -> Decimal:
        return Decimal(str(data, 'utf-8'))


# numpy dtypes an ndarray may have, with the one-byte code stored when the dtype is not fixed.
_DTYPE_CODES = {'uint8': 8, 'int8': 9, 'uint16': 16, 'int16': 17, 'float16': 18, 'uint32': 32,
                'int32': 33, 'float32': 34, 'uint64': 64, 'int64': 65, 'float64': 66}
_CODE_DTYPES = {code: np.dtype(name) for name, code in _DTYPE_CODES.items()}
# Widths of the stored dimensions, by the low two bits of the shape byte.
_DIM_DTYPES = [np.dtype('uint8'), np.dtype('uint16'), np.dtype('uint32'), np.dtype('uint64')]


class NDArray(Encoding):
    """A numpy array; ``ndarray[:dtype[:d0,d1,...]]`` fixes the dtype and optionally the shape.

    Layout: a dtype code byte unless the dtype is fixed, then unless the shape is fixed a shape
    byte ``(ndim << 2) | width`` followed by the dimensions in the narrowest unsigned width that
    holds them, then the array's bytes in C order.
    """

    def __init__(self, dtype: str | None = None, shape: tuple[int, ...] | None = None) -> None:
        if dtype is not None and dtype not in _DTYPE_CODES:
            raise ValueError(f'ndarray dtype must be one of {sorted(_DTYPE_CODES)}, got {dtype!r}')
        if shape is not None and (dtype is None or not shape or min(shape) < 1):
            raise ValueError(f'ndarray shape {shape!r} needs a dtype and positive dimensions')
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.shape = shape
        if self.dtype is not None and shape is not None:
            self.size = int(np.prod(shape)) * self.dtype.itemsize

    @classmethod
    def from_str(cls, text: str) -> NDArray:
        """Build from the text after ``ndarray:``, as in ``'int32'`` or ``'int32:3,4'``."""
        dtype, _, shape_text = text.partition(':')
        try:
            shape = tuple(int(d) for d in shape_text.split(',')) if shape_text else None
        except ValueError:
            raise ValueError(f'ndarray shape must be comma-separated integers, got '
                             f'{shape_text!r}') from None
        return cls(dtype or None, shape)

    def encode(self, obj: np.ndarray) -> bytes:
        self._validate(obj, np.ndarray)
        parts = []
        if self.dtype is None:
            code = _DTYPE_CODES.get(obj.dtype.name)
            if code is None or obj.dtype.byteorder == '>':
                raise ValueError(f'arrays of dtype {obj.dtype} cannot be stored; use one of '
                                 f'{sorted(_DTYPE_CODES)}')
            parts.append(bytes([code]))
        elif obj.dtype != self.dtype:
            raise ValueError(f'expected an array of dtype {self.dtype}, got {obj.dtype}')
        if obj.ndim == 0 or 0 in obj.shape:
            raise ValueError(f'empty and 0-d arrays cannot be stored (shape {obj.shape}); use a '
                             f'scalar encoding for single values')
        if self.shape is None:
            if obj.ndim > 63:
                raise ValueError(f'arrays may have at most 63 dimensions, got {obj.ndim}')
            largest = max(obj.shape)
            width = 0 if largest < 256 else 1 if largest < 65536 else 2 if largest < 1 << 32 else 3
            parts.append(bytes([(obj.ndim << 2) | width]))
            parts.append(struct.pack(f'<{obj.ndim}{"BHIQ"[width]}', *obj.shape))
        elif obj.shape != self.shape:
            raise ValueError(f'expected an array of shape {self.shape}, got {obj.shape}')
        parts.append(obj.tobytes())
        return b''.join(parts)

    def decode(self, data: bytes) -> np.ndarray:
        pos = 0
        dtype = self.dtype
        if dtype is None:
            dtype = _CODE_DTYPES[data[0]]
            pos = 1
        shape = self.shape
        if shape is None:
            ndim, width = data[pos] >> 2, data[pos] & 3
            dim_dtype = _DIM_DTYPES[width]
            shape = tuple(np.frombuffer(data, dim_dtype, ndim, pos + 1).tolist())
            pos += 1 + ndim * dim_dtype.itemsize
        return np.frombuffer(data, dtype, offset=pos).reshape(shape)


def _pil():  # noqa: ANN202
    from PIL import Image
    return Image


class PIL(Encoding):
    """A PIL image as raw pixels: uint32 width, height and mode length, the mode, the pixels."""

    def encode(self, obj: Any) -> bytes:
        self._validate(obj, _pil().Image)
        mode = obj.mode.encode('utf-8')
        width, height = obj.size
        header = np.array([width, height, len(mode)], np.uint32).tobytes()
        return header + mode + obj.tobytes()

    def decode(self, data: bytes) -> Any:
        width, height, mode_len = np.frombuffer(data, np.uint32, 3).tolist()
        mode = str(data[12:12 + mode_len], 'utf-8')
        return _pil().frombytes(mode, (width, height), data[12 + mode_len:])


class JPEG(Encoding):
    """A PIL image as a JPEG file; an image opened from a JPEG file keeps that file's bytes."""

    def encode(self, obj: Any) -> bytes:
        image_module = _pil()
        self._validate(obj, image_module.Image)
        from PIL.JpegImagePlugin import JpegImageFile
        filename = getattr(obj, 'filename', None)
        if isinstance(obj, JpegImageFile) and filename:
            try:
                with open(filename, 'rb') as f:
                    return f.read()
            except OSError:
                pass  # The source file is gone: re-encode the pixels instead.
        out = BytesIO()
        obj.save(out, format='JPEG')
        return out.getvalue()

    def decode(self, data: bytes) -> Any:
        return _pil().open(BytesIO(data))


class PNG(Encoding):
    """A PIL image as a PNG file."""

    def encode(self, obj: Any) -> bytes:
        self._validate(obj, _pil().Image)
        out = BytesIO()
        obj.save(out, format='PNG')
        return out.getvalue()

    def decode(self, data: bytes) -> Any:
        return _pil().open(BytesIO(data))


def _pack_parts(parts: list[bytes], reserved: bool) -> bytes:
    """uint32 [reserved 0,] count, sizes..., then the parts concatenated."""
    head = [0] if reserved else []
    head += [len(parts)] + [len(p) for p in parts]
    return np.array(head, np.uint32).tobytes() + b''.join(parts)


def _unpack_parts(data: bytes, reserved: bool) -> list[bytes]:
    pos = 4 if reserved else 0
    count = int(np.frombuffer(data, np.uint32, 1, pos)[0])
    sizes = np.frombuffer(data, np.uint32, count, pos + 4).tolist()
    pos += 4 + 4 * count
    parts = []
    for size in sizes:
        parts.append(data[pos:pos + size])
        pos += size
    return parts


class _ImageList(Encoding):
    """A list of images, each encoded with ``element``."""

    element: type[Encoding]

    def encode(self, obj: list) -> bytes:
        self._validate(obj, (list, tuple))
        coder = self.element()
        return _pack_parts([coder.encode(image) for image in obj], reserved=True)

    def decode(self, data: bytes) -> list:
        coder = self.element()
        return [coder.decode(part) for part in _unpack_parts(data, reserved=True)]


class ListPIL(_ImageList):
    """A list of PIL images stored as raw pixels."""

    element = PIL


class ListJPEG(_ImageList):
    """A list of PIL images stored as JPEG files."""

    element = JPEG


class ListPNG(_ImageList):
    """A list of PIL images stored as PNG files."""

    element = PNG


class JPEGArray(Encoding):
    """A list of already-encoded JPEG files; decodes to a list of PIL images.

    Each file is bytes-like (``bytes``, ``bytearray`` or ``memoryview``), as in the reference.
    """

    def encode(self, obj: list) -> bytes:
        self._validate(obj, (list, tuple))
        for item in obj:
            self._validate(item, (bytes, bytearray, memoryview))
        return _pack_parts([bytes(item) for item in obj], reserved=False)

    def decode(self, data: bytes) -> list:
        parts = _unpack_parts(data, reserved=False)
        if not parts:
            raise ValueError('a jpeg_array value holds no images')
        return [_pil().open(BytesIO(part)) for part in parts]


class Pickle(Encoding):
    """Any picklable object. Unsafe to read from untrusted data: needs ``allow_unsafe_types``."""

    def encode(self, obj: Any) -> bytes:
        return pickle.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return pickle.loads(data)


class JSON(Encoding):
    """Any JSON-serializable object (numpy arrays become lists)."""

    def encode(self, obj: Any) -> bytes:
        if isinstance(obj, np.ndarray):
            obj = obj.tolist()
        return json.dumps(obj).encode('utf-8')

    def decode(self, data: bytes) -> Any:
        return json.loads(str(data, 'utf-8'))


_encodings: dict[str, type[Encoding]] = {
    'bytes': Bytes,
    'str': Str,
    'int': Int,
    'ndarray': NDArray,
    **{name: _scalar(name) for name in ['uint8', 'uint16', 'uint32', 'uint64', 'int8', 'int16',
                                       'int32', 'int64', 'float16', 'float32', 'float64']},
    'str_int': StrInt,
    'str_float': StrFloat,
    'str_decimal': StrDecimal,
    'pil': PIL,
    'jpeg': JPEG,
    'jpeg_array': JPEGArray,
    'jpegarray': JPEGArray,
    'png': PNG,
    'list[pil]': ListPIL,
    'list[jpeg]': ListJPEG,
    'list[png]': ListPNG,
    'pkl': Pickle,
    'json': JSON,
}

# Encodings whose decoding can run arbitrary code.
_unsafe_encodings = {'pkl'}


def get_coder(encoding: str) -> Encoding:
    """An encoder/decoder instance for an encoding name such as ``'str'`` or ``'ndarray:int32'``."""
    if not isinstance(encoding, str):
        raise EncodingError(f'An encoding must be a string, got {encoding!r}.')
    name, sep, config = encoding.partition(':')
    cls = _encodings.get(name)
    if cls is None:
        raise EncodingError(f'Unknown encoding {encoding!r}; known encodings: '
                            f'{sorted(_encodings)} (ndarray also as "ndarray:dtype[:d0,d1,...]").')
    if not sep:
        return cls()
    if not hasattr(cls, 'from_str'):
        raise EncodingError(f'Encoding {name!r} takes no parameters, got {encoding!r}.')
    try:
        return cls.from_str(config)
    except ValueError as error:
        raise EncodingError(f'Bad encoding {encoding!r}: {error}.') from None


def get_mds_encodings() -> set[str]:
    """The registered encoding names."""
    return set(_encodings)


def is_mds_encoding(encoding: str) -> bool:
    """Whether ``encoding`` names a usable encoding (False for anything malformed)."""
    try:
        get_coder(encoding)
    except EncodingError:
        return False
    return True


def is_mds_encoding_safe(encoding: str) -> bool:
    """Whether decoding ``encoding`` cannot run arbitrary code."""
    return encoding.partition(':')[0] not in _unsafe_encodings


def get_mds_encoded_size(encoding: str) -> int | None:
    """The fixed encoded size of ``encoding`` in bytes, or None when it varies."""
    return get_coder(encoding).size


def mds_encode(encoding: str, obj: Any) -> bytes:
    """Encode one value; a value that is already ``bytes`` is stored as is."""
    if isinstance(obj, bytes):
        return obj
    return get_coder(encoding).encode(obj)


def mds_decode(encoding: str, data: bytes) -> Any:
    """Decode one value."""
    return get_coder(encoding).decode(data)
