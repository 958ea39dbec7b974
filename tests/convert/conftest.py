"""One local-mode SparkSession (2 cores) for every Spark test in the run.

pyspark is the ``[spark]`` extra: without it these tests skip, unless STREAMING_REQUIRE_SPARK=1
(set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope='session')
def spark():
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        if os.environ.get('STREAMING_REQUIRE_SPARK') == '1':
            pytest.fail('pyspark is required (STREAMING_REQUIRE_SPARK=1) but not installed.')
        pytest.skip('pyspark is not installed (pip install "shardflow[spark]")')
    from tests.convert.spark_cases import session
    os.environ['PYSPARK_PYTHON'] = sys.executable  # Spark's Python workers use this env.
    spark = session(SparkSession)
    yield spark
    spark.stop()
