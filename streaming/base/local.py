"""The reference's ``streaming.base.local``: a map-style dataset over a local directory."""

from streaming.local_dataset import LocalDataset

__all__ = ['LocalDataset']
