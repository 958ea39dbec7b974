"""The reference's ``streaming.base.shuffle.py1s``."""

from streaming.base.shuffle import divide_spans, get_shuffle_py1s

__all__ = ['divide_spans', 'get_shuffle_py1s']
