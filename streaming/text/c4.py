"""C4 (the cleaned Common Crawl corpus) as written by ``python -m streaming.text.convert.c4``."""

from streaming.text.tokenized import TokenizedTextDataset

__all__ = ['StreamingC4']


class StreamingC4(TokenizedTextDataset):
    """C4 samples (``text``, ``timestamp``, ``url``), returned tokenized.

    Takes ``tokenizer_name``, ``max_seq_len`` and ``group_method`` (``'truncate'``) besides the
    ``StreamingDataset`` arguments.
    """
