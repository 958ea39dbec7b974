"""The Pile as written by ``python -m streaming.text.convert.pile``."""

from streaming.text.tokenized import TokenizedTextDataset

__all__ = ['StreamingPile']


class StreamingPile(TokenizedTextDataset):
    """The Pile's samples (``text``, ``pile_set_name``), returned tokenized.

    Takes ``tokenizer_name``, ``max_seq_len`` and ``group_method`` (``'truncate'``) besides the
    ``StreamingDataset`` arguments.
    """
