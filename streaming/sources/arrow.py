"""Arrow IPC files streamed as they are (``datasets.Dataset.save_to_disk`` directories).

``save_to_disk`` writes ``data-NNNNN-of-NNNNN.arrow`` files in the Arrow IPC *stream* format
(the IPC *file* format, which starts with ``ARROW1``, is read the same way). Indexing is one
pass over each file that records where its schema message and each record batch lie; a unit is
a run of consecutive record batches of about ``unit_bytes`` (default 16 MiB), and its local
file is the schema message followed by those batches: a valid IPC stream, memory-mapped and
decoded without copying. Files named ``cache-*`` (``datasets``' map caches) are skipped.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Callable, Iterator

from streaming.errors import SourceFileError
from streaming.format.registry import register_format
from streaming.sources.arrow_values import Decoded, arrow_failures, column_getters, type_name
from streaming.sources.reader import SOURCE_KEYS, SourceReader, check_ranges_entry
from streaming.sources.registry import ChunkFile, SourceFormat, register_source

__all__ = ['ArrowSource', 'ArrowReader']

FILE_MAGIC = b'ARROW1\0\0'
# save_to_disk's file names: data-00003-of-00010.arrow.
_NUMBERED = re.compile(r'data-(\d{5,})-of-(\d{5,})\.arrow')
_MAX_FOOTER = 64 << 20  # An IPC file footer (a few dozen bytes per record batch) is smaller.


class _EndFile(ChunkFile):
    """A ``ChunkFile`` that tells whether a read found nothing left (the stream had no end).

    An IPC stream ends with a zero length (after a continuation marker); a reader that meets
    the end of the file instead stops as quietly, with the batches read so far.
    """

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__(chunks)
        self.ran_out = False

    def read(self, n: int = -1) -> bytes:
        out = super().read(n)
        self.ran_out = n != 0 and not out
        return out


def _pa() -> Any:
    try:
        import pyarrow as pa
    except ImportError:
        raise ImportError('Streaming Arrow files needs pyarrow: pip install pyarrow') from None
    return pa


def _check_after_end(where: str, stream: ChunkFile, file_format: bool) -> None:
    """What follows the end-of-stream must be nothing, or the IPC file format's footer.

    (The footer, its length and the magic.) Else ``SourceFileError``: the stream ended early,
    as where a damaged length reads as its end.
    """
    rest = stream.read(_MAX_FOOTER + 11)
    if len(rest) > _MAX_FOOTER + 10:
        stream.drain()
        rest = rest[:0]  # Too long to be a footer.
    footer_ok = len(rest) >= 10 and rest.endswith(FILE_MAGIC[:6]) and \
        int.from_bytes(rest[-10:-6], 'little') == len(rest) - 10
    if (rest or file_format) and not (file_format and footer_ok):
        raise SourceFileError(f'{where}: {stream.pos} bytes in, the Arrow stream ended but '
                              f'what follows is not ' + ('the IPC file footer' if file_format
                                                         else 'the end of the file') +
                              ': it is corrupt.')


class ArrowSource(SourceFormat):
    """Arrow IPC streams (and files): units are runs of record batches."""

    name = 'arrow'
    extensions = ('.arrow',)
    ignored_prefixes = ('cache-',)
    streamed = True
    options = {'unit_bytes': 16 << 20}
    record_version = 2  # Indexing checks more (issue 32): older sidecar records are redone.

    def check_listing(self, root: str, names: list[str],
                      read: Callable[[str], bytes | None]) -> None:
        """Each folder's data files must all be there.

        Those its ``state.json`` lists, else (without one) every ``data-NNNNN-of-MMMMM.arrow`` of
        the numbering found. ``dataset_info.json`` is not read: the data files describe
        themselves.
        """
        present = set(names)
        for folder in sorted({posixpath.dirname(name) for name in names}):
            state_name = posixpath.join(folder, 'state.json')
            text = read(state_name)
            if text is not None:
                try:
                    files = json.loads(text)['_data_files']
                    listed = [posixpath.join(folder, item['filename']) for item in files]
                    if not all(isinstance(name, str) for name in listed):
                        raise TypeError('a file name is not a string')
                except (ValueError, KeyError, TypeError, RecursionError) as error:
                    raise SourceFileError(f'{posixpath.join(root, state_name)} is not a '
                                          f'datasets state.json ({type(error).__name__}: '
                                          f'{str(error)[:200]}): it is corrupt.') from None
                by = state_name
            else:
                numbered = [m for name in names if posixpath.dirname(name) == folder and
                            (m := _NUMBERED.fullmatch(posixpath.basename(name)))]
                if not numbered:
                    continue
                total = max(int(m.group(2)) for m in numbered)
                listed = [posixpath.join(folder, f'data-{i:05d}-of-{total:05d}.arrow')
                          for i in range(total)]
                by = f'the numbering of {numbered[0].group(0)}'
            missing = [name for name in listed if name not in present]
            if missing:
                raise SourceFileError(f'{posixpath.join(root, missing[0])} is missing (and '
                                      f'{len(missing) - 1} more): {by} lists it. Streaming the '
                                      f'other files would silently skip its rows.')

    def index_chunks(self, where: str, size: int, chunks: Iterator[bytes],
                     options: dict[str, Any]) -> dict[str, Any]:
        pa = _pa()
        stream = _EndFile(chunks)
        head = stream.read(len(FILE_MAGIC))
        if head != FILE_MAGIC:
            stream.unread(head)
        start = stream.pos
        batches: list[tuple[int, int, int]] = []  # (offset, bytes, rows)
        try:
            reader = pa.ipc.open_stream(stream)
            schema_range = [start, stream.pos - start]
            if any(pa.types.is_dictionary(field.type) for field in reader.schema):
                raise SourceFileError(f'{where}: dictionary-encoded Arrow columns are not '
                                      f'supported; stream it as Parquet instead.')
            while True:
                offset = stream.pos
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                batch.validate(full=True)
                batches.append((offset, stream.pos - offset, batch.num_rows))
            if stream.ran_out:
                raise SourceFileError(f'{where}: the Arrow stream ends after {len(batches)} '
                                      f'record batches without its end-of-stream marker: it is '
                                      f'truncated.')
        except (pa.ArrowException, OSError, EOFError) as error:
            raise SourceFileError(f'{where}: not a readable Arrow IPC file ({error}); it is '
                                  f'truncated or corrupt.') from None
        _check_after_end(where, stream, head == FILE_MAGIC)
        if stream.pos != size:
            raise SourceFileError(f'{where}: read {stream.pos} bytes but the file has {size}: '
                                  f'it changed while it was indexed.')
        units: list[dict[str, Any]] = []
        limit = int(options['unit_bytes'])
        for offset, length, rows in batches:
            if units and units[-1]['ranges'][1][1] + length <= limit:
                units[-1]['ranges'][1][1] += length
                units[-1]['samples'] += rows
            else:
                units.append({'samples': rows, 'ranges': [list(schema_range), [offset, length]]})
        schema = reader.schema
        return {'schema': {field.name: type_name(field.type) for field in schema}, 'units': units}


class ArrowReader(SourceReader):
    """A run of record batches of an Arrow file, after its schema message: an IPC stream."""

    @classmethod
    def warm_up(cls) -> None:
        _pa()

    def decode(self) -> tuple[Decoded, int]:
        pa = _pa()
        self.data()  # Present, and of the size the index says.
        # The table's buffers are views of the map, which lives as long as they do.
        what = f'unit {self.unit}'

        def read() -> Any:
            table = pa.ipc.open_stream(pa.memory_map(self.path(self.raw_data))).read_all()
            table.validate(full=True)  # Offsets in bounds, strings UTF-8: else ArrowInvalid.
            return table

        table = self.read_table(arrow_failures(read), what)
        if self.columns is not None:
            table = table.select(self.columns)
        where = f'{what} of {self.source} ({self.where()})'
        return self.decoding(arrow_failures(lambda: column_getters(table, where)),
                             what), table.nbytes


register_source(ArrowSource())
register_format('arrow', reader=ArrowReader, check_entry=check_ranges_entry,
                required_keys=SOURCE_KEYS)
