"""The shard-format registry: the one table that says which formats exist and what they need.

An index entry's ``"format"`` names a registered format. Registering a format once, with
``register_format``, is all it takes for index validation (``load_index``), for
``reader_from_json`` (and so ``LocalDataset`` and ``StreamingDataset``) and for ``merge_index`` to
handle its shards. The built-in formats (mds, json, csv, tsv, xsv) register themselves the same
way, in their packages' ``__init__``; installed plugins may instead declare an entry point in the
group ``streaming.formats``. See ``docs/extending/format.md`` for a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ['ShardFormat', 'register_format', 'unregister_format', 'get_format', 'get_formats',
           'unsafe_encodings', 'check_safe_encodings']

EntryCheck = Callable[[str, Mapping[str, Any]], None]


@dataclass(frozen=True)
class ShardFormat:
    """One registered shard format.

    ``reader``, a ``streaming.format.reader.Reader`` subclass, is built from an index entry's keys
    (its ``__init__`` parameters after ``dirname`` and ``split``); ``writer`` (optional) writes
    shards of the format. (This module imports neither: they sit above it.) ``file_keys`` are
    the entry's keys describing the shard's files (``raw_*`` required, ``zip_*`` null unless
    compressed); ``required_keys`` maps other keys every entry must have to their type.
    ``check_entry(where, entry)`` raises ``IndexFileError`` for what types alone cannot catch;
    ``unsafe_encodings(entry)`` lists the entry's column encodings whose decoding can run
    arbitrary code (datasets refuse them unless ``allow_unsafe_types``). ``shape_only``: both
    read only keys other than ``samples`` and the file keys, so one verdict holds for every
    entry alike in those keys (a large index is then checked once per distinct shape).
    """

    name: str
    reader: type
    writer: type | None = None
    file_keys: tuple[str, ...] = ()
    required_keys: Mapping[str, type] = field(default_factory=dict)
    check_entry: EntryCheck | None = None
    unsafe_encodings: Callable[[Mapping[str, Any]], list[str]] | None = None
    shape_only: bool = False


_formats: dict[str, ShardFormat] = {}


def register_format(name: str, *, reader: type, writer: type | None = None,
                    file_keys: tuple[str, ...] | None = None,
                    required_keys: Mapping[str, type] | None = None,
                    check_entry: EntryCheck | None = None,
                    unsafe_encodings: Callable[[Mapping[str, Any]], list[str]] | None = None,
                    replace: bool = False, shape_only: bool = False) -> ShardFormat:
    """Make shards whose index entry says ``"format": name`` readable everywhere.

    ``file_keys`` defaults to the reader's ``file_keys`` (``('raw_data', 'zip_data')`` for a
    ``SingleFileShardReader``, plus ``raw_meta``/``zip_meta`` for a ``DataMetaShardReader``).
    ``required_keys`` always includes ``samples: int``. Registering a name twice is an error
    unless ``replace=True``. ``shape_only=True`` says that ``check_entry`` and
    ``unsafe_encodings`` read neither ``samples`` nor the file keys (see ``ShardFormat``).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f'register_format: name must be a non-empty string, got {name!r}.')
    if name in _formats and not replace:
        raise ValueError(f'register_format: shard format {name!r} is already registered (by '
                         f'{_formats[name].reader.__qualname__}); pass replace=True to replace '
                         f'it.')
    if not isinstance(reader, type):
        raise TypeError(f'register_format({name!r}): reader must be a class, got {reader!r}.')
    keys = tuple(file_keys if file_keys is not None else getattr(reader, 'file_keys', ()))
    if not keys or not all(isinstance(k, str) and k.startswith(('raw_', 'zip_')) for k in keys):
        raise ValueError(f'register_format({name!r}): file_keys must name the index keys of the '
                         f'shard files, each starting with "raw_" or "zip_", got {keys!r}.')
    required = {'samples': int, **(required_keys or {})}
    for key, kind in required.items():
        if not isinstance(key, str) or not isinstance(kind, type):
            raise TypeError(f'register_format({name!r}): required_keys must map key names to '
                            f'types, got {key!r}: {kind!r}.')
    entry = ShardFormat(name, reader, writer, keys, required, check_entry, unsafe_encodings,
                        bool(shape_only))
    _formats[name] = entry
    return entry


def unregister_format(name: str) -> None:
    """Forget format ``name`` (a test's or a plugin's); ``KeyError`` if it is not registered."""
    get_format(name)
    del _formats[name]


def get_format(name: str) -> ShardFormat:
    """The registered format ``name``; ``KeyError`` naming the known ones if there is none.

    A name not registered yet is looked up in the entry-point group ``streaming.formats``
    (name = format, value = a module whose import registers it, or a function that does), so an
    installed plugin works without being imported first.
    """
    shard_format = _formats.get(name) if isinstance(name, str) else None
    if shard_format is None and isinstance(name, str):
        shard_format = _from_entry_point(name)
    if shard_format is None:
        raise KeyError(f'unknown shard format {name!r}; expected one of {get_formats()}')
    return shard_format


def _from_entry_point(name: str) -> ShardFormat | None:
    from importlib.metadata import entry_points
    for entry_point in entry_points(group='streaming.formats', name=name):
        loaded = entry_point.load()  # Importing the module may register the format ...
        if name not in _formats and callable(loaded):
            loaded()  # ... or the entry point names a function that does.
        return _formats.get(name)
    return None


def get_formats() -> list[str]:
    """The names of the registered shard formats, sorted."""
    return sorted(_formats)


def unsafe_encodings(entry: Mapping[str, Any]) -> list[str]:
    """The column encodings of a shard entry whose decoding can run arbitrary code."""
    shard_format = _formats.get(entry.get('format'))  # type: ignore[arg-type]
    if shard_format is None or shard_format.unsafe_encodings is None:
        return []
    return shard_format.unsafe_encodings(entry)


def check_safe_encodings(where: str, entry: Mapping[str, Any], allow_unsafe_types: bool) -> None:
    """Refuse a shard entry with unsafe column encodings unless ``allow_unsafe_types``.

    The one check and message every dataset class uses; raises ``UnsafeEncodingError``.
    """
    if allow_unsafe_types:
        return
    unsafe = unsafe_encodings(entry)
    if unsafe:
        from streaming.errors import UnsafeEncodingError
        raise UnsafeEncodingError(f'{where}: column encoding(s) {unsafe} can run arbitrary code '
                                  f'when decoded; pass allow_unsafe_types=True only if you trust '
                                  f'whoever wrote this dataset.')
