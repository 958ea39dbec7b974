"""Spark DataFrame -> MDS: every partition is written by its own Spark task, then indexes merge.

``dataframe_to_mds`` takes the reference's arguments and returns what it returns. Each Spark task
writes its partition with an ``MDSWriter`` into ``out/<task attempt id>/`` (locally, or through
``out=(local, remote)`` straight to the remote), and the driver then merges the partitions'
indexes into ``out/index.json``. For the same partitioning the shards are byte-identical to the
reference's.

This module imports pyspark and pandas, so it is only imported when used
(``pip install "shardflow[spark]"``).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from typing import Any, Callable

import numpy as np

from streaming.errors import ColumnMismatchError
from streaming.format import get_index_basename
from streaming.format.mds.encodings import is_mds_encoding
from streaming.merge import merge_index as _merge_index
from streaming.storage.upload import Uploader
from streaming.writing import MDSWriter

try:
    import pandas as pd
    from pyspark import TaskContext
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        ByteType,
        DataType,
        DateType,
        DayTimeIntervalType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        MapType,
        NullType,
        ShortType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(f'streaming.base.converters needs pyspark, pandas and pyarrow ({error.name} '
                      f'is missing); install them with: pip install "shardflow[spark]"') from error

__all__ = ['SPARK_TO_MDS', 'dataframe_to_mds', 'infer_dataframe_schema', 'is_json_compatible']

logger = logging.getLogger(__name__)

# Spark type -> MDS encoding; None marks types Spark has that MDS cannot store. The small integer
# types map to unsigned encodings, as in the reference (so negative values fail to encode).
SPARK_TO_MDS: dict[DataType, str | None] = {
    ByteType(): 'uint8',
    ShortType(): 'uint16',
    IntegerType(): 'int32',
    LongType(): 'int64',
    FloatType(): 'float32',
    DoubleType(): 'float64',
    DecimalType(): 'str_decimal',
    StringType(): 'str',
    BinaryType(): 'bytes',
    BooleanType(): None,
    TimestampType(): None,
    TimestampNTZType(): None,
    DateType(): None,
    DayTimeIntervalType(): None,
    ArrayType(IntegerType()): 'ndarray:int32',
    ArrayType(ShortType()): 'ndarray:int16',
    ArrayType(LongType()): 'ndarray:int64',
    ArrayType(FloatType()): 'ndarray:float32',
    ArrayType(DoubleType()): 'ndarray:float64',
}

_BINARY_ENCODINGS = ('pil', 'png', 'jpeg', 'pkl')
_RESULT_SCHEMA = StructType([StructField('mds_path_local', StringType(), False),
                             StructField('mds_path_remote', StringType(), False)])


def is_json_compatible(data_type: Any) -> bool:
    """Whether values of a Spark type can be stored with the MDS ``json`` encoding.

    Structs, arrays and maps qualify when everything inside them does; of the scalars, strings,
    32-bit integers, floats, booleans and nulls do.
    """
    if isinstance(data_type, StructType):
        return all(is_json_compatible(field.dataType) for field in data_type.fields)
    if isinstance(data_type, ArrayType):
        return is_json_compatible(data_type.elementType)
    if isinstance(data_type, MapType):
        return is_json_compatible(data_type.keyType) and is_json_compatible(data_type.valueType)
    return isinstance(data_type, (StringType, IntegerType, FloatType, BooleanType, NullType))


def _supported() -> str:
    names = sorted(t.simpleString() for t, enc in SPARK_TO_MDS.items() if enc)
    return ', '.join(names)


def _mds_encoding(name: str, data_type: DataType) -> str:
    """The MDS encoding for one column's Spark type; ValueError naming the column if none."""
    if isinstance(data_type, DecimalType):
        encoding = SPARK_TO_MDS[DecimalType()]  # Any precision and scale.
    elif isinstance(data_type, ArrayType):
        # Arrays that cannot hold nulls are as storable as those that can.
        encoding = SPARK_TO_MDS.get(ArrayType(data_type.elementType))
    else:
        encoding = SPARK_TO_MDS.get(data_type)
    if encoding is None:
        hint = ("; give the column an encoding in mds_kwargs['columns'] (e.g. 'json' for nested "
                "values) or cast it" if is_json_compatible(data_type) else '; cast it first')
        raise ValueError(f'Column {name!r} has Spark type {data_type.simpleString()}, which '
                         f'dataframe_to_mds cannot store{hint}. Supported types: {_supported()}.')
    return encoding


def _check_user_column(dataframe: Any, name: str, encoding: str) -> None:
    if name not in dataframe.columns:
        raise ValueError(f"mds_kwargs['columns'] names column {name!r}, which the DataFrame does "
                         f'not have; its columns are {dataframe.columns}.')
    data_type = dataframe.schema[name].dataType
    base = encoding
    if encoding.startswith('ndarray:') and encoding.count(':') == 2:
        base = encoding.rsplit(':', 1)[0]  # 'ndarray:int32:3,4' -> 'ndarray:int32'
    if base == 'json':
        if not is_json_compatible(data_type):
            raise ValueError(f'Column {name!r} of Spark type {data_type.simpleString()} cannot be '
                             f"stored with encoding 'json' (only strings, ints, floats, booleans "
                             f'and arrays, maps and structs of them can).')
        return
    if base in _BINARY_ENCODINGS:
        if not isinstance(data_type, BinaryType):
            raise ValueError(f'Column {name!r} has Spark type {data_type.simpleString()}; encoding '
                             f'{encoding!r} needs a binary column.')
        return
    mapped_encodings = sorted(filter(None, SPARK_TO_MDS.values()))
    if base not in mapped_encodings:
        raise ValueError(f'Column {name!r}: encoding {encoding!r} is not supported by '
                         f'dataframe_to_mds; use one of {mapped_encodings}, json, or '
                         f'{", ".join(_BINARY_ENCODINGS)} for binary columns.')
    mapped = _mds_encoding(name, data_type)
    if mapped != base:
        raise ValueError(f'Column {name!r} has Spark type {data_type.simpleString()}, stored as '
                         f"{mapped!r}, but mds_kwargs['columns'] gives {encoding!r}.")


def infer_dataframe_schema(dataframe: Any,
                           user_defined_cols: dict[str, Any] | None = None) -> dict | None:
    """The MDS ``columns`` for a DataFrame, or a check of the ones a user gave.

    Without ``user_defined_cols``, returns ``{column: encoding}`` for every column through
    ``SPARK_TO_MDS``. With them, checks that each named column exists and that its Spark type
    can be stored with the given encoding, and returns None. Raises ValueError naming the column
    when a type is unsupported or does not match.
    """
    if user_defined_cols is not None:
        for name, encoding in user_defined_cols.items():
            _check_user_column(dataframe, name, encoding)
        return None
    columns = {}
    for field in dataframe.schema:
        encoding = _mds_encoding(field.name, field.dataType)
        if not is_mds_encoding(encoding):  # pragma: no cover - every mapped encoding exists
            raise ValueError(f'Column {field.name!r}: {encoding!r} is not an MDS encoding.')
        columns[field.name] = encoding
    return columns


def _records(pdf: Any, udf: Callable | None, udf_kwargs: dict[str, Any]) -> Iterable:
    if udf is None:
        return pdf.to_dict('records')
    records = udf(pdf, **udf_kwargs)
    if not isinstance(records, Iterable):
        raise TypeError(f'udf_iterable must return an iterable of samples (dicts), got '
                        f'{type(records).__name__}.')
    return records


def _plain(value: Any) -> Any:
    """A nested value as JSON-able Python objects (Arrow hands arrays over as numpy arrays)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _partition_writer(mds_path: tuple[str, str], mds_kwargs: dict[str, Any], merge: bool,
                      udf: Callable | None, udf_kwargs: dict[str, Any]) -> Callable:
    """The function each Spark task runs over its partition's pandas batches."""
    names = set(mds_kwargs['columns'])
    json_columns = [k for k, v in mds_kwargs['columns'].items() if v == 'json']

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        context = TaskContext.get()
        if context is None:
            raise RuntimeError('dataframe_to_mds: no Spark TaskContext; the partition writer must '
                               'run inside a Spark task.')
        part = str(context.taskAttemptId())
        local = os.path.join(mds_path[0], part)
        remote = os.path.join(mds_path[1], part) if mds_path[1] else ''
        kwargs = {**mds_kwargs, 'out': (local, remote) if remote else local}
        if merge:
            kwargs['keep_local'] = True  # The driver merges from the local copies.
        with MDSWriter(**kwargs) as writer:
            for pdf in batches:
                for sample in _records(pdf, udf, udf_kwargs):
                    if isinstance(sample, dict) and len(sample) > len(names):
                        if not names.issubset(sample):
                            raise ColumnMismatchError(
                                f'Sample lacks column(s) {sorted(names - set(sample))}; '
                                f"mds_kwargs['columns'] are {sorted(names)}.")
                        # Columns not in mds_kwargs['columns'] are left out, as in the reference.
                        sample = {k: sample[k] for k in names}
                    if json_columns and isinstance(sample, dict):
                        sample = {**sample, **{k: _plain(sample.get(k)) for k in json_columns}}
                    writer.write(sample)
        index = get_index_basename()
        yield pd.DataFrame({'mds_path_local': [os.path.join(local, index)],
                            'mds_path_remote': [os.path.join(remote, index) if remote else '']})

    return write_partition


def dataframe_to_mds(dataframe: Any, merge_index: bool = True,
                     mds_kwargs: dict[str, Any] | None = None,
                     udf_iterable: Callable | None = None,
                     udf_kwargs: dict[str, Any] | None = None) -> tuple[str, str]:
    """Write a Spark DataFrame as an MDS dataset, one sub-dataset per Spark task.

    Args:
        dataframe: the ``pyspark.sql.DataFrame`` to convert (must not be empty).
        merge_index: merge the partitions' indexes into ``out/index.json`` (default True).
        mds_kwargs: ``MDSWriter`` arguments; ``out`` is required (a local directory, a remote
            URL, or a ``(local, remote)`` pair). ``columns`` is inferred from the schema when
            omitted (see ``SPARK_TO_MDS``), else checked against it. ``compression`` defaults
            to ``'zstd'``.
        udf_iterable: optional ``f(pandas_df, **udf_kwargs) -> iterable of samples`` applied to
            each pandas batch of a partition; then ``mds_kwargs['columns']`` is required and
            not checked against the DataFrame, since the function may create new columns.
        udf_kwargs: keyword arguments for ``udf_iterable``.

    Returns:
        ``(local, remote)``: where the dataset was written; ``remote`` is ``''`` when ``out``
        was a local directory.

    """
    if dataframe is None or dataframe.isEmpty():
        raise ValueError('dataframe_to_mds: the input DataFrame is None or empty.')
    kwargs = dict(mds_kwargs or {})
    udf_kwargs = dict(udf_kwargs or {})
    if 'out' not in kwargs:
        raise ValueError("dataframe_to_mds: mds_kwargs must give 'out' (and may give 'columns').")
    if 'compression' not in kwargs:
        logger.info('dataframe_to_mds: compression defaults to zstd.')
        kwargs['compression'] = 'zstd'
    if udf_iterable is not None:
        if 'columns' not in kwargs:
            raise ValueError("dataframe_to_mds: with udf_iterable, mds_kwargs['columns'] must "
                             'give the columns of the samples it yields.')
    elif 'columns' in kwargs:
        infer_dataframe_schema(dataframe, kwargs['columns'])
    else:
        kwargs['columns'] = infer_dataframe_schema(dataframe)
        logger.info('dataframe_to_mds: inferred columns %s', kwargs['columns'])

    out = kwargs['out']
    # Checks ``out`` and makes the local directory (empty unless exist_ok lets it be emptied).
    uploader = Uploader(out, keep_local=bool(kwargs.get('keep_local', False)),
                        exist_ok=bool(kwargs.get('exist_ok', False)))
    if uploader.remote is None:
        logger.warning('dataframe_to_mds: %s is a local path; on a cluster, pass out=(local '
                       'scratch, remote) unless it is shared storage.', uploader.local)
    mds_path = (uploader.local, uploader.remote or '')
    writer = _partition_writer(mds_path, kwargs, merge_index, udf_iterable, udf_kwargs)
    rows = dataframe.mapInPandas(writer, schema=_RESULT_SCHEMA).collect()

    # With a remote, the local copies go only if keep_local=False was given explicitly.
    keep_local_files = uploader.remote is None or kwargs.get('keep_local', True) is not False
    if merge_index:
        index_files = [(row['mds_path_local'], row['mds_path_remote']) for row in rows]
        _merge_index(index_files, out, keep_local=keep_local_files, download_timeout=60)
    if not keep_local_files:
        shutil.rmtree(uploader.local, ignore_errors=True)
    return mds_path
