"""The reference's ``streaming.base.spanner`` import path."""

from streaming.dataset.spanner import Spanner

__all__ = ['Spanner']
