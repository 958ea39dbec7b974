"""Shard formats: writers, readers, and the index that ties shards into a dataset.

This layer encodes and writes local shard files and reads them back; it never touches remote
storage. The writers here take a local ``out`` directory and an ``on_file_done`` hook; the public
writers (``streaming.MDSWriter`` and co., in ``streaming.writing``) attach uploads to that hook.
Formats are looked up in ``streaming.format.registry``; importing this package registers the
built-in shard formats (MDS, JSON, CSV/TSV/XSV). Data files read in place (Parquet, JSON Lines,
WebDataset, Arrow) register their formats from ``streaming.sources``, which ``import streaming``
loads.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any, Iterator, MutableMapping

from streaming.errors import EncodingError, IndexFileError
from streaming.format.index import FileInfo, get_index_basename, validate_shard_entry
from streaming.format.json import JSONReader, JSONWriter
from streaming.format.mds import MDSReader, MDSWriter
from streaming.format.reader import DataMetaShardReader, Reader, SingleFileShardReader
from streaming.format.registry import (
    ShardFormat,
    get_format,
    get_formats,
    register_format,
    unregister_format,
    unsafe_encodings,
)
from streaming.format.writer import DataMetaShardWriter, SingleFileShardWriter, Writer
from streaming.format.xsv import CSVReader, CSVWriter, TSVReader, TSVWriter, XSVReader, XSVWriter

__all__ = ['CSVWriter', 'FileInfo', 'get_index_basename', 'JSONWriter', 'MDSWriter', 'Reader',
           'reader_from_json', 'TSVWriter', 'XSVWriter', 'MDSReader', 'JSONReader', 'CSVReader',
           'TSVReader', 'XSVReader', 'Writer', 'SingleFileShardWriter', 'DataMetaShardWriter',
           'SingleFileShardReader', 'DataMetaShardReader', 'ShardFormat', 'register_format',
           'get_format', 'get_formats', 'unregister_format', 'unsafe_encodings']


class _ReaderTable(MutableMapping):
    """The reference's ``_readers`` (format name -> reader class), a view of the registry.

    Assigning ``_readers[name] = SomeReader`` registers the format, as it did in the reference.
    """

    def __getitem__(self, name: str) -> type[Reader]:
        return get_format(name).reader

    def __setitem__(self, name: str, reader: type[Reader]) -> None:
        register_format(name, reader=reader, replace=True)

    def __delitem__(self, name: str) -> None:
        unregister_format(name)

    def __iter__(self) -> Iterator[str]:
        return iter(get_formats())

    def __len__(self) -> int:
        return len(get_formats())


_readers: MutableMapping[str, type[Reader]] = _ReaderTable()


@cache
def _init_params(cls: type) -> frozenset[str]:
    """The keyword arguments a reader class takes from an index entry."""
    names = set(inspect.signature(cls.__init__).parameters) - {'self', 'dirname', 'split'}
    return frozenset(names)


def reader_from_json(dirname: str, split: str | None, obj: dict[str, Any],
                     validate: bool = True) -> Reader:
    """The reader for one shard entry of an index; unknown extra keys are ignored.

    Pass ``validate=False`` for entries that came through ``load_index``, which checked them.
    """
    if validate:
        validate_shard_entry(f'shard entry in {dirname}', obj)
    try:
        cls = get_format(obj.get('format')).reader
    except KeyError as error:
        raise IndexFileError(f'Shard entry {obj.get("raw_data")} in {dirname}: '
                             f'{error.args[0]}') from None
    params = _init_params(cls)
    kwargs = {k: v for k, v in obj.items() if k in params}
    kwargs.setdefault('compression', None)
    kwargs.setdefault('hashes', [])
    kwargs.setdefault('size_limit', None)
    try:
        reader = cls(dirname, split, **kwargs)
    except TypeError as error:
        raise IndexFileError(f'Shard entry {obj.get("raw_data")} in {dirname} is missing a '
                             f'key: {error}') from None
    except EncodingError as error:
        raise IndexFileError(f'Shard entry {obj.get("raw_data")} in {dirname}: {error}') from None
    reader.format = obj['format']  # Checked against the shard's own header when opened.
    return reader
