"""Arrow columns as the values MDS readers give: ints, floats, str, bytes, numpy arrays.

A decoded table (a Parquet row group, an Arrow record batch) is turned once into one accessor
per column, so that sample ``i`` costs a few slices, not a ``to_pylist`` of the table:

* lists (and fixed-size lists) of numbers, at any depth, without nulls: a numpy array per
  sample (a view of the decoded buffer for one level);
* binary and string columns: ``bytes``/``str`` cut from the data buffer when asked for;
* numbers and booleans: Python scalars; everything else (structs, maps, timestamps...):
  what ``pyarrow``'s ``as_py`` gives. A null is ``None``.

Decoded tables of one process are kept under a byte budget (``STREAMING_DECODED_BYTES``,
default 512 MiB, read when used: a change after import is followed), least recently used
dropped first; a dropped one is decoded again when next read.
"""

from __future__ import annotations

import bisect
import os
from collections import OrderedDict
from typing import Any, Callable, NamedTuple

import numpy as np

from streaming.errors import SourceFileError
from streaming.format.mds.reader import Spans
from streaming.storage.environ import on_environ

__all__ = ['arrow_failures', 'column_getters', 'Decoded', 'DecodedCache', 'decoded_budget',
           'span_accessors', 'type_name', 'with_spans']

DECODED_BYTES_ENV = 'STREAMING_DECODED_BYTES'
DEFAULT_DECODED_BYTES = 512 << 20

Getter = Callable[[int], Any]
Gatherer = Callable[[np.ndarray], Any]


class Decoded(NamedTuple):
    """A decoded unit's columns: ``getters`` give sample ``i``'s value.

    ``gatherers`` give the values of samples ``indices`` at once (an int64 array for integers,
    a list for ``str`` and ``bytes``); None when some column has another kind, or nulls.
    """

    getters: dict[str, Getter]
    gatherers: dict[str, Gatherer] | None


# Arrow number types as numpy dtypes (pyarrow's own ``to_numpy`` imports pandas: seconds per
# process, in every DataLoader worker).
_DTYPES = {'int8': 'i1', 'int16': '<i2', 'int32': '<i4', 'int64': '<i8', 'uint8': 'u1',
           'uint16': '<u2', 'uint32': '<u4', 'uint64': '<u8', 'halffloat': '<f2',
           'float': '<f4', 'double': '<f8', 'bool': '?'}


def _to_numpy(array: Any) -> np.ndarray:
    """A numpy view (copy for booleans) of an Arrow array of numbers without nulls."""
    name = str(array.type)
    if name == 'bool' or array.null_count:
        return np.array(array.to_pylist(), _DTYPES.get(name, object))
    data = array.buffers()[1]
    if data is None:
        return np.zeros(0, _DTYPES[name])
    return np.frombuffer(data, _DTYPES[name])[array.offset:array.offset + len(array)]


def _numeric(pa: Any, kind: Any) -> bool:
    types = pa.types
    return types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind)


def _list_leaf(pa: Any, kind: Any) -> Any:
    """The innermost value type of nested (fixed-size) lists, or None if ``kind`` is no list."""
    types = pa.types
    if not (types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind)):
        return None
    while types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
        kind = kind.value_type
    return kind


def _binary_getter(arrays: list[Any], large: bool, text: bool, where: str,
                   base: Any = None) -> tuple[Getter, Gatherer | None]:
    """Sample ``i``'s ``bytes``/``str`` cut from the data buffer of the chunk that holds it."""
    datas, chunk_ids, starts, ends = [], [], [], []
    any_null = any(array.null_count for array in arrays)
    null: list[bool] | None = [] if any_null else None
    for number, array in enumerate(arrays):
        _, offsets_buf, data_buf = array.buffers()[:3]
        offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32)[
            array.offset:array.offset + len(array) + 1]
        datas.append(memoryview(data_buf) if data_buf is not None else memoryview(b''))
        chunk_ids.append(np.full(len(array), number, np.int32))
        starts.append(offsets[:-1])
        ends.append(offsets[1:])
        if null is not None:
            null.extend(array.is_null().to_pylist())
    return span_accessors(datas, np.concatenate(chunk_ids), np.concatenate(starts),
                          np.concatenate(ends), null, text, where, base)


def span_accessors(datas: list[memoryview], chunk: np.ndarray, start: np.ndarray,
                   end: np.ndarray, null: list[bool] | None, text: bool,
                   where: str = 'a column', base: Any = None) -> tuple[Getter, Gatherer | None]:
    """(getter, gatherer) of values that are spans of buffers, cut when asked for.

    Sample ``i`` is ``datas[chunk[i]][start[i]:end[i]]`` as ``bytes`` (``str`` if ``text``),
    None where ``null[i]``; the gatherer is None when there are nulls. A ``str`` value that is
    not UTF-8 raises ``SourceFileError`` naming ``where`` (the column and unit) and the row.
    ``base``: a map that holds every one of ``datas`` (a unit file mapped from the node's
    shared directory); a ``bytes`` column's gatherer then also has ``spans(indices)``, the
    values as ``Spans`` of that map, not copied (``with_spans``).
    """
    start, end = start.astype(np.int64), end.astype(np.int64)
    start_list, end_list, chunk_list = start.tolist(), end.tolist(), chunk.tolist()
    kind: Any = (lambda view: str(view, 'utf-8')) if text else bytes
    data = datas[0] if datas else memoryview(b'')

    def get(i: int) -> Any:
        if null is not None and null[i]:
            return None
        try:
            return kind(datas[chunk_list[i]][start_list[i]:end_list[i]])
        except UnicodeDecodeError as error:
            raise _not_utf8(where, i, error) from None

    def gather(indices: np.ndarray) -> list[Any]:
        try:
            if len(datas) == 1:
                return [kind(data[a:b]) for a, b in zip(start[indices].tolist(),
                                                         end[indices].tolist())]
            return [kind(datas[c][a:b]) for c, a, b in zip(chunk[indices].tolist(),
                                                            start[indices].tolist(),
                                                            end[indices].tolist())]
        except UnicodeDecodeError:
            return [get(i) for i in indices.tolist()]  # Raises, naming the row.

    if null is not None:
        return get, None
    if base is not None and not text:
        where_in_base = _offsets_in(base, datas)
        if where_in_base is not None:
            absolute_start, absolute_end = start + where_in_base[chunk], end + where_in_base[chunk]
            gather.spans = lambda indices: Spans(  # type: ignore[attr-defined]
                base, absolute_start[indices], absolute_end[indices])
    return get, gather


def _offsets_in(base: Any, datas: list[Any]) -> np.ndarray | None:
    """Where each of ``datas`` starts in ``base`` (one map), or None if one lies elsewhere."""
    origin = np.frombuffer(base, np.uint8)
    low, size = origin.ctypes.data, len(origin)
    offsets = []
    for data in datas:
        view = np.frombuffer(data, np.uint8)
        offset = view.ctypes.data - low
        if not len(view) or not 0 <= offset <= offset + len(view) <= size:
            return None
        offsets.append(offset)
    return np.array(offsets, np.int64)


def with_spans(gather: Gatherer) -> Gatherer:
    """``gather``'s ``spans`` if it has one (values left in their map), else ``gather``."""
    return getattr(gather, 'spans', gather)


def arrow_failures(read: Callable[[], Any]) -> Callable[[], Any]:
    """``read`` with pyarrow's errors that are no ``ValueError`` or ``OSError`` made one.

    A damaged size or type makes pyarrow raise ``ArrowMemoryError`` (a ``MemoryError``: a
    declared page of 32 GiB) or ``ArrowNotImplementedError`` (a flipped bit in a type);
    readers turn ``ValueError`` into ``SourceFileError``.
    """
    def run() -> Any:
        import pyarrow as pa
        try:
            return read()
        except (pa.ArrowMemoryError, pa.ArrowNotImplementedError) as error:
            raise ValueError(f'{type(error).__name__}: {error}') from None
    return run


def _not_utf8(where: str, row: int, error: UnicodeDecodeError) -> Exception:
    return SourceFileError(f'{where}: the string of row {row} is not valid UTF-8 ({error}): '
                           f'the file is corrupt.')


def _list_getter(pa: Any, array: Any) -> Getter | None:
    """One numpy array per sample for a one-level list of numbers without nulls."""
    types = pa.types
    if array.null_count or array.values.null_count:
        return None
    values = _to_numpy(array.flatten())
    if types.is_fixed_size_list(array.type):
        size = array.type.list_size
        return lambda i: values[i * size:(i + 1) * size]
    offsets = _to_numpy(array.offsets)
    offsets = (offsets - offsets[0]).tolist()
    return lambda i: values[offsets[i]:offsets[i + 1]]


def type_name(kind: Any) -> str:
    """A column type's name for comparing files: list item names and dictionary encoding ignored.

    (pyarrow names a list's items ``element``, Spark and older writers ``item``; a dictionary of
    strings reads as strings.)
    """
    import pyarrow as pa
    types = pa.types

    def plain(t: Any) -> Any:
        if types.is_dictionary(t):
            return plain(t.value_type)
        if types.is_fixed_size_list(t):
            return pa.list_(plain(t.value_type), t.list_size)
        if types.is_large_list(t):
            return pa.large_list(plain(t.value_type))
        if types.is_list(t):
            return pa.list_(plain(t.value_type))
        if types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type)) for f in t])
        return t

    return str(plain(kind))


def _nested_getter(rows: list[Any], dtype: Any) -> Getter:
    """A numpy array per sample from nested lists (None stays None)."""
    return lambda i: None if rows[i] is None else np.asarray(rows[i], dtype)


def _chunked_getter(getters: list[Getter], lengths: list[int]) -> Getter:
    """One getter over the getters of consecutive chunks of ``lengths`` rows."""
    first = np.cumsum([0] + lengths[:-1]).tolist()

    def get(i: int) -> Any:
        c = bisect.bisect_right(first, i) - 1
        return getters[c](i - first[c])

    return get


def _column_accessors(pa: Any, column: Any, where: str,
                      base: Any = None) -> tuple[Getter, Gatherer | None]:
    """(getter, gatherer or None) of a column: an Arrow array or a table's chunked array.

    ``base``: the map the column's buffers lie in, if any (see ``span_accessors``).

    A column of several chunks (a unit of several row groups) is read chunk by chunk, not
    concatenated first: no copy of its values.
    """
    types = pa.types
    arrays = [column] if not hasattr(column, 'num_chunks') else \
        [chunk for chunk in column.chunks if len(chunk)] or [column.combine_chunks()]
    kind = arrays[0].type
    if types.is_dictionary(kind):
        arrays = [array.dictionary_decode() for array in arrays]
        kind = arrays[0].type
    leaf = _list_leaf(pa, kind)
    if types.is_binary(kind) or types.is_large_binary(kind) or types.is_string(kind) or \
            types.is_large_string(kind):
        return _binary_getter(
            arrays, types.is_large_binary(kind) or types.is_large_string(kind),
            types.is_string(kind) or types.is_large_string(kind), where, base)
    if _numeric(pa, kind):
        gather = None
        if types.is_integer(kind) and not any(array.null_count for array in arrays):
            gather = np.concatenate([_to_numpy(array) for array in arrays]).astype(
                np.int64).__getitem__
        return _python_values(arrays).__getitem__, gather
    if leaf is not None and _numeric(pa, leaf):
        getters: list[Getter] = []
        for array in arrays:
            getter = _list_getter(pa, array) if _list_leaf(pa, kind.value_type) is None \
                else None
            getters.append(getter or _nested_getter(array.to_pylist(), _DTYPES[str(leaf)]))
        if len(getters) == 1:
            return getters[0], None
        return _chunked_getter(getters, [len(array) for array in arrays]), None
    return _python_values(arrays).__getitem__, None


def _python_values(arrays: list[Any]) -> list[Any]:
    """The values of consecutive chunks as one Python list (built only where it is read)."""
    if len(arrays) == 1:
        return arrays[0].to_pylist()
    return [value for array in arrays for value in array.to_pylist()]


def column_getters(table: Any, where: str = 'a table', base: Any = None) -> Decoded:
    """The getters (and gatherers) of the columns of a ``pyarrow.Table`` (or record batch).

    ``where``: the unit the table is, named by errors of its values (a string not UTF-8);
    ``base``: the map its buffers lie in, if any (see ``span_accessors``).
    """
    import pyarrow as pa
    getters: dict[str, Getter] = {}
    gatherers: dict[str, Gatherer] | None = {}
    for name in table.column_names:
        getter, gather = _column_accessors(pa, table.column(name), f'column {name!r} of {where}',
                                           base)
        getters[name] = getter
        if gather is None:
            gatherers = None
        elif gatherers is not None:
            gatherers[name] = gather
    return Decoded(getters, gatherers)


@on_environ
def decoded_budget() -> int:
    """The process's budget of decoded bytes: ``STREAMING_DECODED_BYTES`` as it is now."""
    value = os.environ.get(DECODED_BYTES_ENV, '').strip()
    if not value:
        return DEFAULT_DECODED_BYTES
    try:
        return int(value)
    except ValueError:
        raise ValueError(f'{DECODED_BYTES_ENV}={value!r} must be a whole number of bytes '
                         f'(the decoded data each process keeps).') from None


class DecodedCache:
    """Which owners of this process hold decoded data (``owner.decoded``), under a byte budget.

    The least recently used owner's ``decoded`` is set to None when the budget is exceeded.
    ``budget`` None: ``decoded_budget()``, read at each use.
    """

    def __init__(self, budget: int | None = None) -> None:
        self.fixed_budget = budget
        self._items: OrderedDict[int, tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    @property
    def budget(self) -> int:
        """Bytes of decoded data kept at most (but always the newest owner's)."""
        return self.fixed_budget if self.fixed_budget is not None else decoded_budget()

    def touch(self, owner: Any) -> None:
        """``owner`` was just read (keep it longest)."""
        if id(owner) in self._items:
            self._items.move_to_end(id(owner))

    def put(self, owner: Any, value: Any, nbytes: int) -> None:
        """Set ``owner.decoded = value`` (``nbytes`` large), dropping others' beyond the budget."""
        budget = self.budget  # First: a bad setting raises before anything changes.
        self.drop(owner)
        owner.decoded = value
        self._items[id(owner)] = (owner, nbytes)
        self._bytes += nbytes
        while self._bytes > budget and len(self._items) > 1:
            _, (old, size) = self._items.popitem(last=False)
            old.decoded = None
            self._bytes -= size

    def drop(self, owner: Any) -> None:
        """Forget ``owner``'s decoded data."""
        item = self._items.pop(id(owner), None)
        if item is not None and item[0] is owner:
            self._bytes -= item[1]
        owner.decoded = None
