"""DataFrames the Spark tests convert; also imported by ``ref_spark.py`` in the reference's env.

Standalone on purpose (pyspark and the standard library only), so both envs build the very same
rows with the very same partitioning.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

# Every Spark type SPARK_TO_MDS maps to an encoding, one column each.
ALL_TYPES = ('b byte, s short, i int, l long, f float, d double, dec decimal(10,2), txt string, '
             'bin binary, ai array<int>, ash array<short>, al array<long>, af array<float>, '
             'ad array<double>')
ALL_TYPES_COLUMNS = {'b': 'uint8', 's': 'uint16', 'i': 'int32', 'l': 'int64', 'f': 'float32',
                     'd': 'float64', 'dec': 'str_decimal', 'txt': 'str', 'bin': 'bytes',
                     'ai': 'ndarray:int32', 'ash': 'ndarray:int16', 'al': 'ndarray:int64',
                     'af': 'ndarray:float32', 'ad': 'ndarray:float64'}


def all_types_rows(n: int) -> list[tuple[Any, ...]]:
    """``n`` rows of ALL_TYPES; small integers stay non-negative (they map to unsigned types) and
    arrays non-empty (MDS cannot store an empty ndarray)."""
    rows = []
    for i in range(n):
        k = i % 7
        rows.append((i % 128, (i * 31) % 30000, i - n // 2, i * 1_000_003 - 5, i / 8, i / 3,
                     Decimal(f'{i}.{i % 100:02}'), f'row {i} ' + 'x' * k, bytes([i % 256]) * k,
                     list(range(k + 1)), [i % 100] * (k + 1), [i * 10**10] * (k % 3 + 1),
                     [i / 2] * (k + 2), [-i / 7] * (k + 1)))
    return rows


def session(spark_session_cls: Any, cores: int = 2) -> Any:
    """A quiet local-mode SparkSession (no UI, few shuffle partitions)."""
    spark = (spark_session_cls.builder.master(f'local[{cores}]').appName('shardflow-tests')
             .config('spark.ui.enabled', 'false').config('spark.sql.shuffle.partitions', '2')
             .config('spark.driver.memory', '1g').getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    return spark


def dataframe(spark: Any, rows: list[tuple[Any, ...]], schema: str, partitions: int) -> Any:
    """A DataFrame of ``rows`` split into exactly ``partitions`` partitions, in row order."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), schema)
