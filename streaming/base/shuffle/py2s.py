"""The reference's ``streaming.base.shuffle.py2s``."""

from streaming.base.shuffle import get_shuffle_py2s

__all__ = ['get_shuffle_py2s']
