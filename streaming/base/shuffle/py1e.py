"""The reference's ``streaming.base.shuffle.py1e``."""

from streaming.base.shuffle import divide_spans, get_shuffle_py1e

__all__ = ['divide_spans', 'get_shuffle_py1e']
