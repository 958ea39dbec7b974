"""Data files streamed where they lie, without conversion: Parquet, JSON Lines, WebDataset, Arrow.

A *source format* indexes a data file into *units* (a Parquet row group, a range of JSONL lines,
a run of tar members, an Arrow record batch) from metadata only, and reads a unit back as
samples. Each unit becomes an ordinary shard entry, so the rest of the library (order, cache,
resumption) treats it as a shard. The modules:

- ``registry``: ``SourceFormat`` and ``register_source``, how each kind is indexed;
- ``reader``: ``SourceReader``, the reader base of a unit, and decoding units ahead;
- ``parquet`` (with ``parquet_footer`` and ``parquet_pages``), ``jsonl``, ``webdataset`` (with
  ``tar_walk``) and ``arrow`` (with ``arrow_values``, the column values all of them decode to);
- ``remote``: listing, ranged reads and fetches pinned to a file's indexed size and ETag;
- ``sidecar``: the sidecar index of a directory, built and reused;
- ``validate``: what ``streaming inspect`` and ``streaming validate`` report of one.

Importing this package registers the built-in source formats with the shard-format registry
(``streaming.format.registry``); ``import streaming`` does so. ``SourceStream``, the dataset's
stream over such files, is ``streaming.dataset.source_stream``. pyarrow is imported only when a
Parquet or Arrow unit is decoded.
"""

from streaming.sources import arrow, jsonl, parquet, webdataset  # noqa: F401  (registration)
