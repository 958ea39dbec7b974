"""The reader base of units of data files streamed as they are (Parquet row groups, JSONL ranges).

A unit's shard entry names its source file (``source``, ``source_size``, ``source_etag``), its
number in that file (``unit``) and the byte ``ranges`` of the source that its local file holds,
end to end, and optionally its ``layout``: what the indexer saw of the unit's structure (a tar's
walk), for ``decode`` to check again. A subclass implements ``decode``: the unit's data as
``{column: get(i)}``, kept while the unit is in use (under the process's ``DecodedCache``
budget); ``decode_checked`` is what callers use. A subclass that
implements ``decode_columns`` (the unit's columns as ``UnitColumns``) and ``accessors`` (those
made ``Decoded``) instead has its units decoded once per node: with several processes reading
on the node (DataLoader workers, local ranks) and a ``unit_store`` set by the shard cache, one
process decodes a unit and publishes it as a file the others map (``cache.decoded_units``).

A unit of a file on a local disk may be read in place (``source_root`` set, and the reader's
``reads_in_place``): no local copy is made; ``data()`` maps the source file itself, once its size
and version tag are checked against the index, and checked again once the unit is decoded (a
file changed meanwhile is a ``StaleSourceError``).
"""

from __future__ import annotations

import mmap
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from streaming.errors import IndexFileError, SourceFileError, StaleSourceError
from streaming.fileio import file_etag
from streaming.format.index import FileInfo
from streaming.format.reader import Reader
from streaming.sources.arrow_values import Decoded, DecodedCache, with_spans
from streaming.sources.unit_file import UnitColumns, map_unit, write_unit

__all__ = ['SourceReader', 'check_ranges_entry', 'DecodeAhead', 'decode_width', 'readers_on_node',
           'undecoded', 'SOURCE_KEYS']

SOURCE_KEYS = {'source': str, 'source_size': int, 'unit': int, 'ranges': list}
_decoded = DecodedCache()
# Units decoded at once by ``DecodeAhead``: this process's pool (made again after a fork).
_pool: tuple[int, ThreadPoolExecutor | None] | None = None


class SourceReader(Reader):
    """One unit of a source file, made local as its byte ranges end to end."""

    file_keys = ('raw_data', 'zip_data')
    reads_in_place = False  # Whether ``decode`` can read the source file itself (source_root).

    def __init__(self, dirname: str, split: str | None, compression: str | None,
                 hashes: list[str], raw_data: FileInfo, samples: int,
                 size_limit: int | str | None, zip_data: FileInfo | None, source: str,
                 source_size: int, unit: int, ranges: list[list[int]],
                 source_etag: str | None = None, columns: list[str] | None = None,
                 first_line: int = 1, row_groups: list[int] | None = None,
                 source_root: str | None = None, layout: dict[str, Any] | None = None) -> None:
        super().__init__(dirname, split, compression, hashes, samples, size_limit)
        self.raw_data, self.zip_data = raw_data, zip_data
        self.file_pairs = [(raw_data, zip_data)]
        self.source, self.source_size, self.source_etag = source, source_size, source_etag
        self.unit, self.ranges, self.columns = unit, ranges, columns
        self.first_line, self.row_groups = first_line, row_groups
        self.layout = layout  # What the indexer saw of the unit's structure, checked on decode.
        self.source_root = source_root if self.reads_in_place else None
        self.decoded: Decoded | None = None
        # The node's decoded units and this unit's number there (set by the shard cache).
        self.unit_store: Any = None
        self.shard_id = -1

    def check_files(self, maps: list[mmap.mmap]) -> None:
        pass  # Sizes are checked by the map; the content when decoded.

    def data(self) -> mmap.mmap:
        """The local file (or, read in place, the whole source file), mapped."""
        return (self._maps or self._open())[0]

    def where(self) -> str:
        """Where this unit is read from: its local copy, or the source file in place."""
        if self.source_root is not None:
            return f'read in place from {os.path.join(self.source_root, self.source)}'
        return f'cached as {self.path(self.raw_data)}'

    def _source_file(self) -> Any:
        """The source file read in place, open, checked to be the version indexed."""
        path = os.path.join(self.source_root or '', self.source)
        try:
            handle = open(path, 'rb')
        except FileNotFoundError:
            raise StaleSourceError(f'{path} no longer exists (it was indexed with '
                                   f'{self.source_size} bytes): rebuild the index (streaming '
                                   f'index URL) or let the stream re-list its files.') from None
        st = os.fstat(handle.fileno())
        if st.st_size != self.source_size or \
                (self.source_etag is not None and file_etag(st) != self.source_etag):
            handle.close()
            raise StaleSourceError(f'{path} changed since it was indexed (now {st.st_size} '
                                   f'bytes, ETag {file_etag(st)}; the index says '
                                   f'{self.source_size} bytes, ETag {self.source_etag}): '
                                   f'rebuild the index (streaming index URL) or let the stream '
                                   f're-list its files.')
        return handle

    def check_source(self) -> None:
        """Read in place: the source file must be there, as indexed (else ``StaleSourceError``)."""
        self._source_file().close()

    def _open(self) -> list[mmap.mmap]:
        if self.source_root is None:
            return super()._open()
        with self._source_file() as handle:
            self._maps = [mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)]
        return self._maps

    @classmethod
    def warm_up(cls) -> None:
        """Import what ``decode`` uses, now rather than inside the first batch.

        Called as a stream of this format is built (``SourceStream.get_shards``), so that
        DataLoader workers forked later inherit the modules instead of each importing them.
        """

    def decode(self) -> tuple[Decoded, int]:
        """(the unit's columns decoded, bytes that takes in memory)."""
        return self.accessors(self.decode_columns())

    def decode_columns(self) -> UnitColumns:
        """The unit's columns as decoded, before they are accessors (shared by the node)."""
        raise NotImplementedError

    def accessors(self, columns: UnitColumns) -> tuple[Decoded, int]:
        """``decode_columns()``'s columns as ``Decoded``, and the bytes they take."""
        raise NotImplementedError

    def shares_decode(self) -> bool:
        """Whether this unit is decoded once for the node: see the module docstring."""
        return self.unit_store is not None and self.shard_id >= 0 and \
            type(self).decode_columns is not SourceReader.decode_columns and \
            readers_on_node() > 1 and os.environ.get('STREAMING_SHARED_DECODE') != '0'

    def decode_checked(self) -> tuple[Decoded, int]:
        """``decode()``; read in place, the source must still be as indexed once decoded.

        A file changed in place while it was decoded (its size or mtime differ) may have given
        a mix of two versions: ``StaleSourceError``, nothing of it kept. Decoded once per node
        (``shares_decode``), the process that decodes it checks.
        """
        if self.shares_decode():
            columns = self.unit_store.unit(self.shard_id, self)
            if columns is not None:
                return self.accessors(columns)
        decoded = self.decode()
        if self.source_root is not None:
            self.check_source()
        if self.unit_store is not None and self.shard_id >= 0:
            self.unit_store.count(self.shard_id, self, decoded[1])
        return decoded

    def decode_note(self) -> tuple[str, int, int]:
        """(The stream's local directory, processes reading on the node, this process's budget).

        What the node's decode count (``cache.decoded_units``) warns with.
        """
        stream = os.path.join(self.dirname, self.split) if self.split else self.dirname
        return stream, readers_on_node(), _decoded.budget

    def decode_if_free(self) -> None:
        """Decode (or map) the unit now, unless another process of the node is decoding it.

        Shared units only; a failure is left for the caller's own read to raise.
        """
        if self.decoded is not None or not self.shares_decode():
            return
        try:
            columns = self.unit_store.unit(self.shard_id, self, wait=False)
            if columns is not None:
                _decoded.put(self, *self.accessors(columns))
        except Exception:  # noqa: BLE001 - raised again by the caller's read.
            pass

    # ---- what the node's store of decoded units (``cache.decoded_units``) calls ----
    def write_decoded(self, file: Any) -> tuple[UnitColumns | None, int | None]:
        """Decode the unit and write it to ``file`` (a new unit file), for the node.

        Returns (the columns, the file's size): size None when the unit is not worth sharing
        (nothing compressed: the file is to be dropped), 0 when the file could not be written
        (no room). Read in place, the source is checked once decoded, as ``decode_checked``.
        A subclass may write the columns as it decodes them and give None for them (the
        store maps the file, or decodes again for this process if it cannot).
        """
        columns = self.decode_columns()
        if self.source_root is not None:
            self.check_source()
        if not columns.shared:
            return columns, None
        try:
            return columns, write_unit(file, columns)
        except OSError:
            return columns, 0

    @staticmethod
    def map_columns(path: str) -> tuple[UnitColumns, int]:
        """The columns of the unit file at ``path``, mapped, and its size."""
        return map_unit(path)

    def read_table(self, read: Callable[[], Any], what: str) -> Any:
        """``read()``: this unit as a pyarrow table, any failure a ``SourceFileError``.

        ``what`` names the unit (``row group 3``). A table of another row count than the index
        says means the index is stale.
        """
        table = self.decoding(read, what)
        self.check_rows(table.num_rows, what)
        return table

    def decoding(self, read: Callable[[], Any], what: str) -> Any:
        """``read()``, a failure to decode (``what``: the unit) a ``SourceFileError``."""
        try:
            return read()
        except FileNotFoundError:
            raise
        except (OSError, ValueError, TypeError, KeyError, IndexError) as error:
            raise SourceFileError(f'{what} of {self.source} ({self.where()}) cannot be decoded '
                                  f'({type(error).__name__}: {error}): it is corrupt.') from None

    def check_rows(self, rows: int, what: str) -> None:
        """A unit of another row count than the index says: the index is stale."""
        if rows != self.samples:
            raise SourceFileError(f'{what} of {self.source} has {rows} rows but the index says '
                                  f'{self.samples}: the index is stale.')

    def close(self) -> None:
        _decoded.drop(self)
        try:
            super().close()
        except BufferError:
            pass  # A view in a traceback still uses the map; freeing it closes the map.

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state['decoded'] = None
        return state

    def columns_decoded(self) -> Decoded:
        """The unit's columns, decoded now if they are not at hand."""
        decoded = self.decoded
        if decoded is None:
            decoded, nbytes = self.decode_checked()
            _decoded.put(self, decoded, nbytes)
        else:
            _decoded.touch(self)
        return decoded

    def getters(self) -> dict[str, Callable[[int], Any]]:
        """``{column: get(i)}`` of the unit."""
        return self.columns_decoded().getters

    def get_item(self, idx: int) -> dict[str, Any]:
        return {name: get(idx) for name, get in self.getters().items()}

    def gather_columns(self, indices: np.ndarray, spans: bool = False) -> dict[str, Any] | None:
        """The columns of samples ``indices`` at once (the batch fast path; see ``Decoded``).

        ``spans``: ``bytes`` columns of a unit mapped from the node's shared directory as
        ``Spans`` of that map, not copied (the caller copies them once, into the hand-off).
        """
        gatherers = self.columns_decoded().gatherers
        if not gatherers or not len(indices):
            return None
        if spans:
            return {name: with_spans(gather)(indices) for name, gather in gatherers.items()}
        return {name: gather(indices) for name, gather in gatherers.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.get_item(i) for i in range(self.samples))


def check_ranges_entry(where: str, entry: dict[str, Any]) -> None:
    """``ranges`` must be a list of ``[start, length]`` pairs of non-negative ints."""
    if not isinstance(entry.get('ranges'), list) or not all(
            isinstance(r, list) and len(r) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in r)
            for r in entry['ranges']):
        raise IndexFileError(f'{where}: "ranges" must be a list of [start, length] pairs.')


def decode_width() -> int:
    """Units this process decodes at once: its share of the cores, at most 4.

    The cores are shared by the node's ranks (``LOCAL_WORLD_SIZE``) and each one's DataLoader
    workers (with 2 workers on 2 cores, a pool per worker was slower than decoding in line:
    docs/sources/parquet.md, "Local reads").
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else \
        os.cpu_count() or 1
    return min(4, max(1, cores // readers_on_node()))


def readers_on_node() -> int:
    """Processes reading on this node: the node's ranks (``LOCAL_WORLD_SIZE``) times workers."""
    data = sys.modules.get('torch.utils.data')  # Never imported here: loaded, or no workers.
    info = data.get_worker_info() if data is not None else None
    return (info.num_workers if info is not None else 1) * \
        max(1, int(os.environ.get('LOCAL_WORLD_SIZE') or 1))


def _decode_pool() -> ThreadPoolExecutor | None:
    """This process's pool of ``decode_width()`` threads (None if 1: decode in line)."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        width = decode_width()
        _pool = (os.getpid(), ThreadPoolExecutor(width, thread_name_prefix='streaming-decode')
                 if width > 1 else None)
    return _pool[1]


def undecoded(reader: Any) -> bool:
    """Whether ``reader`` is a unit of a data file whose columns are not decoded now."""
    return isinstance(reader, SourceReader) and reader.decoded is None


class DecodeAhead:
    """Decodes the units of ``readers`` on a small pool, a few ahead of the one being read.

    A shuffled batch draws on many units, all undecoded at an epoch's start; decoded one after
    the other, they leave cores idle, while pyarrow releases the GIL as it decodes. Without a
    pool (a process's share of the cores is one), units decoded once per node that no other
    process is decoding now are decoded first, in line (``decode_if_free``). ``readers``
    are in the order they will be read; ``wait(reader)`` before each read. At most the pool's
    width of units are decoded ahead (held beyond what one-by-one reads would hold). A unit
    whose decoding fails is left undecoded: the caller's own read raises the error, where it
    handles it. ``close()`` (also when the reads stop early) lets no decode run on, and keeps
    what was decoded (a batch may go on to read its units sample by sample).
    """

    def __init__(self, readers: Sequence[Any]) -> None:
        self.futures: dict[int, tuple[Any, Future]] = {}
        self.pool = _decode_pool() if len(readers) > 1 else None
        if self.pool is None and len(readers) > 1:  # In line: what nobody decodes now, first.
            for reader in readers:
                if getattr(reader, 'unit_store', None) is not None:
                    reader.decode_if_free()
        self.waiting = iter(readers if self.pool is not None else ())
        for _ in range(self.pool._max_workers if self.pool is not None else 0):
            self._submit_next()

    def _submit_next(self) -> None:
        for reader in self.waiting:
            self.futures[id(reader)] = (reader,  # type: ignore[union-attr]
                                        self.pool.submit(reader.decode_checked))
            return

    def wait(self, reader: Any) -> None:
        """``reader``'s unit decoded, if it is one of ours; the next one started."""
        item = self.futures.pop(id(reader), None)
        if item is None:
            return
        self._submit_next()
        _keep(reader, item[1])

    def close(self) -> None:
        """Cancel the decodes not started; keep those started (else read again: decoded twice).

        The reads may stop before they reach every unit decoded ahead: a batch whose columns
        cannot be gathered at once is read sample by sample instead, from these same units.
        """
        for reader, future in self.futures.values():
            if not future.cancel():
                _keep(reader, future)
        self.futures.clear()


def _keep(reader: Any, future: Future) -> None:
    """The decode ``future`` of ``reader``'s unit, once done, kept as ``reader.decoded``."""
    try:
        decoded, nbytes = future.result()
    except Exception:  # noqa: BLE001 - raised again by the caller's read.
        return
    _decoded.put(reader, decoded, nbytes)
