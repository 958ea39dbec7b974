"""Run the reference's ``dataframe_to_mds`` in its own env: ``<ref python> ref_spark.py JOB.json``.

JOB gives ``out`` (where the reference writes), ``read`` and ``result`` (a dataset the reference
reads back into canonical JSON), ``rows``, ``partitions`` and ``mds_kwargs``. Prints a JSON report:
the reference's SPARK_TO_MDS and its inferred columns for the all-types DataFrame.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), 'oracle')]

import ref_driver  # noqa: E402  (installs the torchvision stand-in, imports the reference)
import spark_cases  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from streaming.base.converters import (  # noqa: E402  (the reference's)
    SPARK_TO_MDS,
    dataframe_to_mds,
    infer_dataframe_schema,
)

STAND_IN = {  # The torchvision stand-in of ref_driver, as files, for Spark's Python workers.
    'torchvision/__init__.py': '',
    'torchvision/datasets.py': 'class VisionDataset:\n    pass\n',
    'torchvision/transforms/__init__.py': '',
    'torchvision/transforms/functional.py': 'def to_tensor(x):\n    return x\n',
}


def worker_stand_in(root: str) -> None:
    """Spark's Python workers import the reference afresh: give them the stand-in too."""
    for name, text in STAND_IN.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), 'w') as f:
            f.write(text)
    os.environ['PYTHONPATH'] = root


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    os.environ['PYSPARK_PYTHON'] = sys.executable
    worker_stand_in(os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), 'stand-in'))
    spark = spark_cases.session(SparkSession)
    df = spark_cases.dataframe(spark, spark_cases.all_types_rows(job['rows']),
                               spark_cases.ALL_TYPES, job['partitions'])
    inferred = infer_dataframe_schema(df)
    dataframe_to_mds(df, mds_kwargs={'out': job['out'], **job['mds_kwargs']})
    spark.stop()
    if job.get('read'):
        ref_driver.op_read(job['read'], job['result'])
    mapping = [[t.simpleString(), enc] for t, enc in SPARK_TO_MDS.items()]
    json.dump({'mapping': mapping, 'inferred': inferred}, sys.stdout)


if __name__ == '__main__':
    main()
