"""The reference's ``streaming.base.format.mds.encodings`` import path.

``_encodings`` here is the very table the library uses, so encodings registered through this
path work everywhere. The encoding classes carry the reference's names too.
"""

from streaming.format.mds.encodings import *  # noqa: F401,F403
from streaming.format.mds.encodings import (  # noqa: F401
    JPEG,
    JSON,
    PIL,
    PNG,
    Bytes,
    Encoding,
    Int,
    JPEGArray,
    ListJPEG,
    ListPIL,
    ListPNG,
    NDArray,
    Pickle,
    Scalar,
    Str,
    StrDecimal,
    StrFloat,
    StrInt,
    _encodings,
    _ImageList,
    get_mds_encoded_size,
    get_mds_encodings,
    is_mds_encoding,
    is_mds_encoding_safe,
    mds_decode,
    mds_encode,
)

# The reference's names for the numpy scalar encodings and the image-list encodings.
UInt8, UInt16, UInt32, UInt64 = (_encodings[f'uint{n}'] for n in (8, 16, 32, 64))
Int8, Int16, Int32, Int64 = (_encodings[f'int{n}'] for n in (8, 16, 32, 64))
Float16, Float32, Float64 = (_encodings[f'float{n}'] for n in (16, 32, 64))
PILList, JPEGList, PNGList = ListPIL, ListJPEG, ListPNG
List = _ImageList
# The reference's common base of the encodings stored as text (str_int, str_float, ...).
StrEncoding = Encoding

__all__ = ['get_mds_encoded_size', 'get_mds_encodings', 'is_mds_encoding',
           'is_mds_encoding_safe', 'mds_decode', 'mds_encode']
