"""The reference's ``streaming.base.shuffle.py1br``."""

from streaming.base.shuffle import divide_spans, get_shuffle_py1br

__all__ = ['divide_spans', 'get_shuffle_py1br']
