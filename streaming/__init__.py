"""Stream training data from local disk or object storage, compatible with MosaicML Streaming.

Writers are imported eagerly (they need only numpy); anything built on torch is imported the
first time it is used, so ``import streaming`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import streaming.sources  # noqa: F401  (importing it registers the in-place source formats)
from streaming._lazy import load_lazy
from streaming._version import __version__
from streaming.writing import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter

__all__ = ['CSVWriter', 'JSONWriter', 'LocalDataset', 'MDSWriter', 'SourceStream', 'Stream',
           'StreamingDataLoader', 'StreamingDataset', 'TSVWriter', 'World', 'XSVWriter',
           '__version__']

# Public name -> module that defines it, imported on first access (these import torch).
_LAZY = {'LocalDataset': 'streaming.local_dataset', 'Stream': 'streaming.dataset.stream',
         'SourceStream': 'streaming.dataset.source_stream',
         'StreamingDataset': 'streaming.dataset.dataset',
         'StreamingDataLoader': 'streaming.dataloader', 'World': 'streaming.world'}


if TYPE_CHECKING:  # Type checkers see the real classes (py.typed); at run time they stay lazy.
    from streaming.dataloader import StreamingDataLoader
    from streaming.dataset.dataset import StreamingDataset
    from streaming.dataset.source_stream import SourceStream
    from streaming.dataset.stream import Stream
    from streaming.local_dataset import LocalDataset
    from streaming.world import World

# The reference's domain packages, imported on first access (they need torch; their optional
# torchvision / transformers load only when their classes are used).
_SUBPACKAGES = ('multimodal', 'text', 'vision')


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f'{__name__}.{name}')
    return load_lazy(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))
