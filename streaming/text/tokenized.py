"""The shared base of ``StreamingC4`` and ``StreamingPile``: text samples tokenized on read."""

from __future__ import annotations

from typing import Any

from streaming.base.legacy import LegacyDataset

__all__ = ['TokenizedTextDataset']


class TokenizedTextDataset(LegacyDataset):
    """Samples ``{'text': ...}`` returned as the tokenizer's output for that text.

    ``tokenizer_name`` is anything ``transformers.AutoTokenizer.from_pretrained`` takes (a hub
    name or a local directory); transformers is imported here, not by ``import streaming``.
    ``group_method='truncate'`` pads or truncates every sample to ``max_seq_len`` tokens.
    """

    def __init__(self, *, tokenizer_name: str, max_seq_len: int, group_method: str,
                 **kwargs: Any) -> None:
        if group_method != 'truncate':
            raise ValueError(f"group_method must be 'truncate' (the only one supported), got "
                             f'{group_method!r}.')
        if max_seq_len < 1:
            raise ValueError(f'max_seq_len must be >= 1, got {max_seq_len}.')
        super().__init__(**kwargs)
        self.tokenizer_name = tokenizer_name
        self.max_seq_len = max_seq_len
        self.group_method = group_method
        try:
            from transformers import AutoTokenizer
        except ImportError as error:
            raise ImportError(f'{type(self).__name__} needs transformers: pip install '
                              f'"shardflow[text]"') from error
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
        if self.tokenizer.pad_token is None:  # e.g. GPT-2's: pad with the end-of-text token.
            self.tokenizer.pad_token = self.tokenizer.eos_token

    def get_item(self, idx: int, retry: int = 7) -> Any:
        """Sample ``idx``, tokenized (``input_ids``, ``attention_mask``, ...)."""
        text = super().get_item(idx, retry)['text']
        return self.tokenizer(text, truncation=True, padding='max_length',
                              max_length=self.max_seq_len)
