"""Readers that turn common data layouts into samples, for ``streaming convert``.

A source is opened with ``open_source(path, kind)`` and is picklable, so ``write_parallel`` can run
it in worker processes: ``source(part, parts)`` yields the samples of one contiguous part, and the
parts in order give every sample in order. Kinds (``--from``):

- ``jsonl``: one JSON object per line; a single file splits over workers by byte ranges.
- ``csv``: a header line, then rows; numbers are parsed when a whole column parses.
- ``parquet``: a file or a directory of files; splits by row group.
- ``images``: a directory tree of images -> ``{'image': bytes, 'label': subdirectory, 'path'}``.
- ``webdataset``: ``.tar`` files whose members ``KEY.EXT`` group into one sample per KEY, one
  column per EXT (``txt``, ``cls`` and ``json`` as str, others as bytes).
- ``hf``: a Hugging Face ``datasets`` directory written by ``save_to_disk`` (Arrow files), or one
  split of a ``DatasetDict`` directory (``split``). Image/audio features become their bytes.

pyarrow is imported only for ``parquet`` and ``hf``.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import tarfile
from itertools import islice
from typing import Any, Iterator

__all__ = ['KINDS', 'Source', 'detect_kind', 'infer_columns', 'open_source']

KINDS = ('jsonl', 'csv', 'parquet', 'images', 'webdataset', 'hf')
IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff')
_TEXT_EXTS = ('txt', 'cls', 'json')
_SPLIT_BYTES = 1 << 12  # Smallest byte range a jsonl part gets.


def _files(path: str, exts: tuple[str, ...]) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        found = [os.path.join(root, name) for root, _, names in os.walk(path) for name in names
                 if name.lower().endswith(exts)]
        return sorted(found)
    return sorted(glob.glob(path))


def detect_kind(path: str) -> str:
    """The source kind of ``path`` from its name or contents; ValueError if it is unclear."""
    if not os.path.exists(path) and not glob.glob(path):
        raise FileNotFoundError(f'No such file or directory: {path}')
    lower = path.lower()
    for kind, exts in (('jsonl', ('.jsonl', '.ndjson')), ('csv', ('.csv',)),
                       ('parquet', ('.parquet',)), ('webdataset', ('.tar',))):
        if lower.endswith(exts):
            return kind
    if os.path.isdir(path):
        names = set(os.listdir(path))
        if names & {'state.json', 'dataset_dict.json'}:
            return 'hf'
        for kind, exts in (('parquet', ('.parquet',)), ('webdataset', ('.tar',)),
                           ('jsonl', ('.jsonl', '.ndjson')), ('images', IMAGE_EXTS)):
            if _files(path, exts):
                return kind
    raise ValueError(f'Cannot tell the format of {path}; pass --from with one of {list(KINDS)}.')


class Source:
    """Base: ``units`` are the pieces of work; a part reads a contiguous run of them."""

    kind = ''

    def __init__(self, path: str) -> None:
        self.path = path
        self.units: list[Any] = []

    def read(self, unit: Any) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def arrow_schema(self) -> Any:
        """The Arrow schema, for sources that have one (column types come from it)."""
        return None

    def __call__(self, part: int, parts: int) -> Iterator[dict[str, Any]]:
        n = len(self.units)
        for unit in self.units[part * n // parts:(part + 1) * n // parts]:
            yield from self.read(unit)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self(0, 1)


class JSONLSource(Source):
    kind = 'jsonl'

    def __init__(self, path: str, parts: int = 1) -> None:
        super().__init__(path)
        for name in _files(path, ('.jsonl', '.ndjson')):
            size = os.path.getsize(name)
            pieces = max(1, min(parts, size // _SPLIT_BYTES))
            self.units += [(name, size * i // pieces, size * (i + 1) // pieces)
                           for i in range(pieces)]

    def read(self, unit: tuple[str, int, int]) -> Iterator[dict[str, Any]]:
        name, start, end = unit
        with open(name, 'rb') as f:
            pos = start
            if start:
                f.seek(start - 1)
                pos += len(f.readline()) - 1  # The line crossing ``start`` is the previous range's.
            for line in f:  # Each line starting before ``end`` is this range's.
                if pos >= end:
                    break
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    if line.strip():  # Blank lines are skipped.
                        raise ValueError(f'{name}: invalid JSON at byte {pos}: {error}') from None
                pos += len(line)


class CSVSource(Source):
    kind = 'csv'

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.units = _files(path, ('.csv',))
        self.types: dict[str, type] = {}
        rows = list(islice(self._rows(self.units[0]), 1000)) if self.units else []
        for name in (rows[0] if rows else {}):
            values = [r[name] for r in rows]
            self.types[name] = next((t for t in (int, float) if _all_parse(t, values)), str)

    @staticmethod
    def _rows(name: str) -> Iterator[dict[str, str]]:
        with open(name, newline='', encoding='utf-8') as f:
            yield from csv.DictReader(f)

    def read(self, unit: str) -> Iterator[dict[str, Any]]:
        for i, row in enumerate(self._rows(unit)):
            try:
                yield {k: self.types.get(k, str)(v) for k, v in row.items()}
            except (ValueError, TypeError):
                raise ValueError(f'{unit}, row {i + 1}: a value does not parse as its column\'s '
                                 f'type {self.types}: {row}') from None


def _all_parse(kind: type, values: list[str]) -> bool:
    try:
        for v in values:
            kind(v)
    except (ValueError, TypeError):
        return False
    return bool(values)


def _arrow_rows(batch: Any, blob_columns: set[str]) -> Iterator[dict[str, Any]]:
    for row in batch.to_pylist():
        for name in blob_columns:
            value = row[name]
            row[name] = value.get('bytes') if isinstance(value, dict) else value
        yield row


def _blob_columns(schema: Any) -> set[str]:
    """Struct columns with a binary ``bytes`` field (HF Image/Audio features)."""
    import pyarrow as pa
    out = set()
    for field in schema:
        if pa.types.is_struct(field.type) and field.type.get_field_index('bytes') >= 0:
            out.add(field.name)
    return out


class ParquetSource(Source):
    kind = 'parquet'

    def __init__(self, path: str) -> None:
        import pyarrow.parquet as pq
        super().__init__(path)
        for name in _files(path, ('.parquet',)):
            self.units += [(name, g) for g in range(pq.ParquetFile(name).num_row_groups)]
        self._schema = pq.read_schema(self.units[0][0]) if self.units else None

    def arrow_schema(self) -> Any:
        return self._schema

    def read(self, unit: tuple[str, int]) -> Iterator[dict[str, Any]]:
        import pyarrow.parquet as pq
        table = pq.ParquetFile(unit[0]).read_row_group(unit[1])
        for batch in table.to_batches():
            yield from _arrow_rows(batch, _blob_columns(table.schema))


class HFSource(Source):
    kind = 'hf'

    def __init__(self, path: str, split: str | None = None) -> None:
        super().__init__(path)
        if os.path.exists(os.path.join(path, 'dataset_dict.json')):
            with open(os.path.join(path, 'dataset_dict.json')) as f:
                splits = json.load(f)['splits']
            if split not in splits:
                raise ValueError(f'{path} is a DatasetDict with splits {splits}; choose one with '
                                 f'--split.')
            path = os.path.join(path, split)
        state = os.path.join(path, 'state.json')
        if not os.path.exists(state):
            raise ValueError(f'{path} is not a Hugging Face save_to_disk directory (no '
                             f'state.json).')
        with open(state) as f:
            self.units = [os.path.join(path, d['filename']) for d in json.load(f)['_data_files']]
        self._schema = self._open(self.units[0]).schema if self.units else None

    @staticmethod
    def _open(name: str) -> Any:
        import pyarrow as pa
        return pa.ipc.open_stream(pa.memory_map(name))

    def arrow_schema(self) -> Any:
        return self._schema

    def read(self, unit: str) -> Iterator[dict[str, Any]]:
        reader = self._open(unit)
        blobs = _blob_columns(reader.schema)
        for batch in reader:
            yield from _arrow_rows(batch, blobs)


class ImageDirSource(Source):
    kind = 'images'

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.units = _files(path, IMAGE_EXTS)

    def read(self, unit: str) -> Iterator[dict[str, Any]]:
        with open(unit, 'rb') as f:
            data = f.read()
        rel = os.path.relpath(unit, self.path)
        yield {'image': data, 'label': os.path.dirname(rel), 'path': rel}


class WebDatasetSource(Source):
    kind = 'webdataset'

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.units = _files(path, ('.tar',))
        self.exts = sorted({ext for _, sample in islice(self._samples(self.units[0]), 100)
                            for ext in sample}) if self.units else []

    @staticmethod
    def _samples(name: str) -> Iterator[tuple[str, dict[str, bytes]]]:
        key, sample = None, {}
        with tarfile.open(name) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                base = os.path.basename(member.name)
                stem, _, ext = base.partition('.')
                member_key = os.path.join(os.path.dirname(member.name), stem)
                if member_key != key and sample:
                    yield key, sample  # type: ignore[misc]
                    sample = {}
                key = member_key
                sample[ext] = tar.extractfile(member).read()  # type: ignore[union-attr]
        if sample:
            yield key, sample  # type: ignore[misc]

    def read(self, unit: str) -> Iterator[dict[str, Any]]:
        for key, sample in self._samples(unit):
            row: dict[str, Any] = {'__key__': key}
            for ext in self.exts:
                if ext not in sample:
                    raise ValueError(f'{unit}: sample {key!r} has no .{ext} member (the first '
                                     f'samples have {self.exts}).')
                value = sample[ext]
                row[ext] = value.decode('utf-8') if ext in _TEXT_EXTS else value
            yield row


def open_source(path: str, kind: str | None = None, *, parts: int = 1,
                split: str | None = None) -> Source:
    """Open ``path`` as a source of ``kind`` (detected when None)."""
    kind = kind or detect_kind(path)
    if kind not in KINDS:
        raise ValueError(f'Unknown source format {kind!r}; expected one of {list(KINDS)}.')
    if not os.path.exists(path) and not glob.glob(path):
        raise FileNotFoundError(f'No such file or directory: {path}')
    source: Source
    if kind == 'jsonl':
        source = JSONLSource(path, parts)
    elif kind == 'hf':
        source = HFSource(path, split)
    else:
        source = {'csv': CSVSource, 'parquet': ParquetSource, 'images': ImageDirSource,
                  'webdataset': WebDatasetSource}[kind](path)
    if not source.units:
        raise ValueError(f'{path} holds no {kind} data.')
    return source


def _value_encoding(value: Any, fmt: str) -> str:
    if fmt != 'mds':
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f'{fmt} output holds only str, int and float values, got '
                             f'{type(value).__name__}; write MDS instead.')
        return {int: 'int', float: 'float', str: 'str'}[type(value)]
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        return 'json'
    if isinstance(value, int):
        return 'int'
    return {float: 'float64', str: 'str', bytes: 'bytes'}.get(type(value), 'pkl')


def _arrow_encoding(arrow_type: Any, fmt: str) -> str | None:
    import pyarrow as pa
    t = arrow_type
    if pa.types.is_integer(t):
        return 'int' if fmt != 'mds' else str(t)  # int8 ... uint64 are MDS encodings too.
    if pa.types.is_floating(t):
        return 'float' if fmt != 'mds' else {16: 'float16', 32: 'float32'}.get(t.bit_width,
                                                                               'float64')
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return 'str'
    if fmt != 'mds':
        return None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return 'bytes'
    if pa.types.is_struct(t) and t.get_field_index('bytes') >= 0:
        return 'bytes'
    return 'json'


def infer_columns(source: Source, fmt: str = 'mds', given: dict[str, str] | None = None,
                  probe: int = 100) -> dict[str, str]:
    """Column encodings: ``given`` ones win; the rest come from the schema or the first samples."""
    columns: dict[str, str] = {}
    schema = source.arrow_schema()
    if schema is not None:
        for field in schema:
            encoding = _arrow_encoding(field.type, fmt)
            if encoding is None and not (given and field.name in given):
                raise ValueError(f'Column {field.name!r} of type {field.type} cannot be written '
                                 f'as {fmt}; write MDS or give its encoding with --columns.')
            columns[field.name] = encoding or ''
    else:
        for sample in islice(iter(source), probe):
            for name, value in sample.items():
                if name not in columns and value is not None:
                    columns[name] = _value_encoding(value, fmt)
    unknown = sorted(set(given or {}) - set(columns))
    columns.update(given or {})
    if unknown:
        raise ValueError(f'--columns names {unknown}, which {source.path} does not have; its '
                         f'columns are {sorted(columns)}.')
    return columns
