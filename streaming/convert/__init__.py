"""Converting data to shards at scale: Spark (``streaming.convert.spark``) and local processes.

Nothing heavy is imported here; the Spark converter imports pyspark only when its module is.
"""
