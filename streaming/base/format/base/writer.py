"""The reference's ``streaming.base.format.base.writer``."""

from streaming.format.writer import JointWriter, SplitWriter, Writer

__all__ = ['JointWriter', 'SplitWriter', 'Writer']
