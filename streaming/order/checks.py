"""The rules for the order's settings, written once.

``get_epoch_order`` and the dataset's configuration both check through these, so a setting
is accepted or refused the same way (and with the same message) whichever door it comes in by.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ['check_choice', 'check_int']


def check_int(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f'`{name}` must be an int >= {minimum}, got {value!r}')


def check_choice(name: str, value: Any, allowed: Iterable[str]) -> None:
    """Raise ValueError naming ``name`` and the allowed values unless ``value`` is one of them."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f'`{name}` must be one of {allowed}, got {value!r}')
