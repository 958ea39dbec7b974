"""Converters from the usual on-disk forms of vision datasets to MDS (``python -m ...``)."""
