"""Converters from raw text corpora to MDS (``python -m streaming.text.convert.<name>``)."""
