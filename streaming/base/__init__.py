"""The reference's ``streaming.base`` import path, kept so existing code keeps working."""

from typing import Any

import streaming
from streaming import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter

__all__ = ['CSVWriter', 'JSONWriter', 'LocalDataset', 'MDSWriter', 'Stream',
           'StreamingDataLoader', 'StreamingDataset', 'TSVWriter', 'XSVWriter']


def __getattr__(name: str) -> Any:
    # The torch-based names load on first use, as in the top-level package.
    if name in __all__:
        return getattr(streaming, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
