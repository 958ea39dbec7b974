"""The reference's ``streaming.base.converters`` import path; see ``streaming.convert.spark``."""

from streaming.base.converters.dataframe_to_mds import (
                                     SPARK_TO_MDS,
                                     dataframe_to_mds,
                                     infer_dataframe_schema,
                                     is_json_compatible,
)

__all__ = ['SPARK_TO_MDS', 'dataframe_to_mds', 'infer_dataframe_schema', 'is_json_compatible']
