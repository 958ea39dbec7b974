"""The reference's ``streaming.base.shuffle.naive``."""

from streaming.base.shuffle import get_shuffle_naive

__all__ = ['get_shuffle_naive']
