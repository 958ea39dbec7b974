"""The reference's ``streaming.base.converters.dataframe_to_mds`` module path.

The converter itself lives in ``streaming.convert.spark``; importing this module needs pyspark,
as the reference's does.
"""

from __future__ import annotations

from typing import Any, Iterable

from streaming.base.util import get_import_exception_message
from streaming.convert.spark import (
    SPARK_TO_MDS,
    dataframe_to_mds,
    infer_dataframe_schema,
    is_json_compatible,
)
from streaming.format import get_index_basename
from streaming.merge import merge_index
from streaming.storage.upload import Uploader as CloudUploader
from streaming.writing import MDSWriter

__all__ = ['CloudUploader', 'MDSWriter', 'SPARK_TO_MDS', 'dataframe_to_mds', 'do_merge_index',
           'get_import_exception_message', 'get_index_basename', 'infer_dataframe_schema',
           'is_json_compatible']


def do_merge_index(partitions: Iterable[Any], mds_path: str | tuple[str, str]) -> None:
    """Merge the partitions' index files into ``mds_path``'s ``index.json``.

    Each partition is a row (a dict or a Spark ``Row``) with ``mds_path_local`` and, when the
    output has a remote, ``mds_path_remote``, as ``dataframe_to_mds``'s tasks return them.
    """
    index_files = []
    for row in partitions:
        local, remote = row['mds_path_local'], row['mds_path_remote']
        local_index = f'{local}/{get_index_basename()}'
        index_files.append((local_index, f'{remote}/{get_index_basename()}') if remote else
                           local_index)
    if not index_files:
        raise ValueError('do_merge_index: no partitions to merge.')
    merge_index(index_files, mds_path)
