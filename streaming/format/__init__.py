"""Shard formats: writers, readers, and the index that ties shards into a dataset."""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from streaming.errors import EncodingError, IndexFileError
from streaming.format.index import FileInfo, get_index_basename, validate_shard_entry
from streaming.format.json import JSONReader, JSONWriter
from streaming.format.mds import MDSReader, MDSWriter
from streaming.format.reader import Reader
from streaming.format.xsv import CSVReader, CSVWriter, TSVReader, TSVWriter, XSVReader, XSVWriter

__all__ = ['CSVWriter', 'FileInfo', 'get_index_basename', 'JSONWriter', 'MDSWriter', 'Reader',
           'reader_from_json', 'TSVWriter', 'XSVWriter', 'MDSReader', 'JSONReader', 'CSVReader',
           'TSVReader', 'XSVReader']

# Index "format" -> reader class.
_readers: dict[str, type[Reader]] = {
    'csv': CSVReader,
    'json': JSONReader,
    'mds': MDSReader,
    'tsv': TSVReader,
    'xsv': XSVReader,
}


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
    cls = _readers[obj['format']]
    params = _init_params(cls)
    kwargs = {k: v for k, v in obj.items() if k in params}
    kwargs.setdefault('compression', None)
    kwargs.setdefault('hashes', [])
    kwargs.setdefault('size_limit', None)
    try:
        return cls(dirname, split, **kwargs)
    except TypeError as error:
        raise IndexFileError(f'Shard entry {obj.get("raw_data")} in {dirname} is missing a '
                             f'key: {error}') from None
    except EncodingError as error:
        raise IndexFileError(f'Shard entry {obj.get("raw_data")} in {dirname}: {error}') from None
