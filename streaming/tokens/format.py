"""The token-shard format: file names, ``.npy`` headers, window fingerprints, the manifest.

A dataset is a directory (or remote prefix) of

- ``{prefix}_{i:06d}.npy``: a standard NumPy ``.npy`` file holding a 1-D little-endian
  ``uint16`` or ``uint32`` array of token ids, documents packed back to back with EOS;
- ``sample_ids_{i:06d}.bin``: headerless little-endian ``uint64``, one per window of
  ``seq_len`` tokens: the 8-byte blake2b digest of the window's bytes read as an integer;
- optionally ``manifest.json`` (ours): dtype, window length, and per shard the token count,
  byte sizes and checksums. Readers use it when present and never require it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ['MANIFEST', 'FileEntry', 'Manifest', 'NpyLayout', 'ShardEntry', 'TokenFormatError',
           'ids_name', 'npy_header', 'preferred_hash', 'read_npy_layout', 'token_name',
           'window_ids']

MANIFEST = 'manifest.json'
FORMAT = 'streaming-tokens'
HEADER_BYTES = 128
TOKEN_DTYPES = ('uint16', 'uint32')
# Which of a file's manifest checksums to check, first found first.
HASH_PREFERENCE = ('xxh3_128', 'xxh128', 'xxh64', 'sha256', 'sha1', 'md5')
_MAGIC = b'\x93NUMPY'


class TokenFormatError(ValueError):
    """A token shard, sidecar or manifest is malformed or inconsistent (names the file)."""


def token_name(prefix: str, index: int) -> str:
    """``{prefix}_{index:06d}.npy``, the name of token shard ``index``."""
    return f'{prefix}_{index:06d}.npy'


def ids_name(index: int) -> str:
    """``sample_ids_{index:06d}.bin``: the sidecar's name (the same whatever the prefix)."""
    return f'sample_ids_{index:06d}.bin'


def token_dtype(dtype: Any, where: str) -> np.dtype:
    """``dtype`` as a little-endian uint16/uint32 numpy dtype, or a TokenFormatError."""
    try:
        parsed = np.dtype(dtype)
    except TypeError:
        raise TokenFormatError(f'{where}: unsupported token dtype {dtype!r}; tokens are '
                               f'uint16 or uint32.') from None
    if parsed.kind != 'u' or parsed.itemsize not in (2, 4) or parsed.byteorder == '>':
        raise TokenFormatError(f'{where}: unsupported token dtype {parsed.str!r}; tokens are '
                               f'little-endian uint16 or uint32.')
    return parsed.newbyteorder('<')


@dataclass(frozen=True)
class NpyLayout:
    """Where a shard's tokens are: their dtype, count and byte offset in the file."""

    dtype: np.dtype
    count: int
    offset: int


def read_npy_layout(path: str, raw_dtype: Any = None) -> NpyLayout:
    """The token layout of ``path``: a ``.npy`` header, or a headerless file of ``raw_dtype``.

    Raises TokenFormatError naming the file when it is not a 1-D uint16/uint32 array, or when
    its size disagrees with the header (a truncated file).
    """
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        head = f.read(10)
        if head[:6] != _MAGIC:
            if raw_dtype is None:
                raise TokenFormatError(f'{path}: not a .npy file (no NumPy magic); pass the '
                                       f'token dtype to read a headerless token file.')
            dtype = token_dtype(raw_dtype, path)
            if size % dtype.itemsize:
                raise TokenFormatError(f'{path}: {size} bytes is not a whole number of '
                                       f'{dtype.name} tokens.')
            return NpyLayout(dtype, size // dtype.itemsize, 0)
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except ValueError as error:
            raise TokenFormatError(f'{path}: unreadable .npy header ({error}).') from None
        offset = f.tell()
    if len(shape) != 1:
        raise TokenFormatError(f'{path}: token shards are 1-D arrays, this one has shape '
                               f'{shape}.')
    dtype = token_dtype(dtype, path)
    expected = offset + shape[0] * dtype.itemsize
    if size != expected:
        raise TokenFormatError(f'{path}: {size} bytes on disk but its header describes '
                               f'{shape[0]} {dtype.name} tokens ({expected} bytes); the file is '
                               f'truncated or was written incompletely.')
    return NpyLayout(dtype, int(shape[0]), offset)


def npy_header(dtype: Any, count: int) -> bytes:
    """A ``.npy`` (v1.0) header of exactly 128 bytes for ``count`` tokens of ``dtype``.

    Fixed length, so a writer can reserve it first and fill it in once the count is known.
    """
    descr = token_dtype(dtype, 'npy_header').str
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({count},), }}"
    padding = HEADER_BYTES - 10 - len(text) - 1
    if padding < 0:
        raise ValueError(f'npy_header: a count of {count} does not fit a 128-byte header.')
    body = (text + ' ' * padding + '\n').encode('latin1')
    header = _MAGIC + bytes([1, 0]) + len(body).to_bytes(2, 'little') + body
    assert len(header) == HEADER_BYTES
    assert ast.literal_eval(text)['shape'] == (count,)
    return header


def window_ids(tokens: np.ndarray, seq_len: int) -> np.ndarray:
    """The sidecar entries of ``tokens``, one per whole window of ``seq_len`` tokens.

    Each is the 8-byte blake2b digest of the window's bytes, read as a little-endian uint64.
    """
    tokens = np.ascontiguousarray(tokens)
    windows = len(tokens) // seq_len
    out = np.empty(windows, dtype='<u8')
    raw = memoryview(tokens[:windows * seq_len].view(np.uint8))
    step = seq_len * tokens.dtype.itemsize
    for i in range(windows):
        digest = hashlib.blake2b(raw[i * step:(i + 1) * step], digest_size=8).digest()
        out[i] = int.from_bytes(digest, 'little')
    return out


# ---- the manifest ---------------------------------------------------------------------------
_HEX = re.compile(r'^[0-9a-f]+$')


@dataclass(frozen=True)
class FileEntry:
    """One file of a shard: its name, byte size and checksums (``{algo: hex}``)."""

    basename: str
    bytes: int
    hashes: dict[str, str] = field(default_factory=dict)


def preferred_hash(entry: FileEntry | None) -> str | None:
    """Which of ``entry``'s checksums to check (``HASH_PREFERENCE``), or None without any."""
    if entry is None or not entry.hashes:
        return None
    return next((a for a in HASH_PREFERENCE if a in entry.hashes), next(iter(entry.hashes)))


@dataclass(frozen=True)
class ShardEntry:
    """One shard: its number, token count, the token file and (optionally) the sidecar."""

    index: int
    num_tokens: int
    tokens: FileEntry
    ids: FileEntry | None = None

    @property
    def bytes(self) -> int:
        return self.tokens.bytes + (self.ids.bytes if self.ids else 0)


@dataclass
class Manifest:
    """What a token dataset holds; ``manifest.json`` beside the shards."""

    dtype: str
    seq_len: int
    shards: list[ShardEntry]
    prefix: str = 'train'
    eos_id: int | None = None
    tokenizer: str | None = None
    version: int = 1

    def to_json(self) -> str:
        body = {'format': FORMAT, **asdict(self)}
        return json.dumps(body, indent=1, sort_keys=True) + '\n'

    @classmethod
    def from_json(cls, text: str | bytes, where: str = MANIFEST) -> Manifest:
        """Parse and validate a manifest; TokenFormatError (naming ``where``) if malformed."""
        try:
            body = json.loads(text)
            if body.get('format') != FORMAT:
                raise ValueError(f'"format" is {body.get("format")!r}, expected {FORMAT!r}')
            if int(body.get('version', 1)) > 1:
                raise ValueError(f'version {body["version"]} is newer than this library reads')
            dtype = token_dtype(body['dtype'], where).name
            seq_len = int(body['seq_len'])
            if seq_len <= 0:
                raise ValueError(f'seq_len must be positive, got {seq_len}')
            shards = [_shard(entry) for entry in body['shards']]
        except TokenFormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise TokenFormatError(f'{where}: malformed token manifest: {error}') from None
        numbers = [s.index for s in shards]
        if len(set(numbers)) != len(numbers):
            raise TokenFormatError(f'{where}: shard numbers repeat: {numbers}')
        return cls(dtype, seq_len, shards, str(body.get('prefix', 'train')),
                   body.get('eos_id'), body.get('tokenizer'), int(body.get('version', 1)))

    @classmethod
    def load(cls, path: str) -> Manifest:
        with open(path, 'rb') as f:
            return cls.from_json(f.read(), path)


def _file(entry: dict[str, Any] | None) -> FileEntry | None:
    if entry is None:
        return None
    size = int(entry['bytes'])
    hashes = {str(k): str(v).lower() for k, v in (entry.get('hashes') or {}).items()}
    if size < 0 or any(not _HEX.match(v) for v in hashes.values()):
        raise ValueError(f'bad file entry {entry!r}')
    if '/' in entry['basename'] or entry['basename'] in ('', '.', '..'):
        raise ValueError(f'basename {entry["basename"]!r} must be a plain file name')
    return FileEntry(str(entry['basename']), size, hashes)


def _shard(entry: dict[str, Any]) -> ShardEntry:
    tokens = _file(entry['tokens'])
    assert tokens is not None
    return ShardEntry(int(entry['index']), int(entry['num_tokens']), tokens,
                      _file(entry.get('ids')))
