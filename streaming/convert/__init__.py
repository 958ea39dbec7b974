"""Converting data to shards at scale.

- ``write_parallel``: one dataset written by several local processes
  (``streaming.convert.parallel``).
- ``streaming.convert.spark``: a Spark DataFrame written by its Spark tasks (imports pyspark, so it
  is imported only when used; its reference import path is ``streaming.base.converters``).
- ``streaming.convert.inputs``: readers for jsonl, csv, parquet, image directories, WebDataset
  tars and Hugging Face ``save_to_disk`` directories, used by ``streaming convert``.
"""

from streaming.convert.parallel import write_parallel

__all__ = ['write_parallel']
