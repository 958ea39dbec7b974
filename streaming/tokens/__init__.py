"""Pre-tokenized token shards streamed from object storage, rotated under a disk budget.

Not imported by ``import streaming``; names load on first use::

    from streaming.tokens import ShardRotation, TokenWindowDataset, list_shards
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    'Manifest': 'format', 'ShardEntry': 'format', 'FileEntry': 'format',
    'TokenFormatError': 'format', 'read_npy_layout': 'format', 'window_ids': 'format',
    'token_name': 'format', 'ids_name': 'format',
    'TokenWindowDataset': 'dataset', 'MDSTokenWindows': 'mds',
    'EpochSampler': 'sampler', 'WindowDrawSampler': 'sampler', 'window_seed': 'sampler',
    'RemoteShard': 'store', 'ShardStore': 'store', 'ShardWaitTimeout': 'store',
    'ShardRotation': 'rotation', 'DiskBudgetError': 'rotation',
    'R2Config': 'remote', 'ConfigError': 'remote', 'list_shards': 'remote',
    'remote_from_env': 'remote',
    'TokenShardWriter': 'writer', 'pretokenize': 'pretokenize',
    'ShardCorruptError': 'verify', 'TokenMix': 'mix', 'pretokenize_spark': 'spark',
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value = getattr(importlib.import_module(f'{__name__}.{module}'), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
