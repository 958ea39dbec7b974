"""A canonical, JSON-able form of decoded samples, so two processes can compare them.

Standalone on purpose (numpy, Pillow and the standard library only): the reference's env runs
this same file. Types are part of the form, so a numpy scalar never equals a Python int.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import numpy as np


def canon(value: Any) -> Any:
    """The canonical form of one decoded value."""
    if isinstance(value, np.ndarray):
        return ['ndarray', value.dtype.str, list(value.shape), value.tobytes().hex()]
    if isinstance(value, np.generic):
        return ['numpy', type(value).__name__, value.tobytes().hex()]
    if isinstance(value, Decimal):
        return ['Decimal', str(value)]
    if isinstance(value, bool) or value is None:
        return [type(value).__name__, value]
    if isinstance(value, (int, str)):
        return [type(value).__name__, value]
    if isinstance(value, float):
        return ['float', value.hex()]
    if isinstance(value, bytes):
        return ['bytes', value.hex()]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [canon(v) for v in value]]
    if isinstance(value, dict):
        return ['dict', [[canon(k), canon(v)] for k, v in sorted(value.items(), key=repr)]]
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        Image = None
    if Image is not None and isinstance(value, Image.Image):
        pixels = hashlib.sha1(value.tobytes()).hexdigest()
        return ['image', type(value).__name__, value.mode, list(value.size), pixels]
    raise TypeError(f'no canonical form for {type(value).__name__}')


def canon_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """The canonical form of one decoded sample."""
    return {key: canon(value) for key, value in sorted(sample.items())}
