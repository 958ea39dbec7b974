"""English Wikipedia prepared for BERT-style masked language modelling."""

from __future__ import annotations

from typing import Any

import numpy as np

from streaming.base.legacy import LegacyDataset

__all__ = ['StreamingEnWiki']

# Each column holds the raw bytes of a 1-D array of this dtype.
FIELD_DTYPES = {
    'input_ids': np.int32, 'input_mask': np.int32, 'attention_mask': np.int32,
    'segment_ids': np.int32, 'token_type_ids': np.int32, 'masked_lm_positions': np.int32,
    'masked_lm_ids': np.int32, 'masked_lm_weights': np.float32,
    'next_sentence_labels': np.int32, 'labels': np.int32,
}


class StreamingEnWiki(LegacyDataset):
    """Samples ``{'input_ids', 'token_type_ids', 'attention_mask', 'labels'}`` as numpy arrays.

    ``labels`` is -100 except at the masked positions, which hold the original token ids.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.field_dtypes = dict(FIELD_DTYPES)

    def get_item(self, idx: int, retry: int = 7) -> Any:
        """Sample ``idx`` decoded into arrays."""
        raw = super().get_item(idx, retry)
        unknown = set(raw) - set(self.field_dtypes)
        if unknown:
            raise ValueError(f'StreamingEnWiki: unexpected columns {sorted(unknown)} in sample '
                             f'{idx}; expected some of {sorted(self.field_dtypes)}.')
        fields = {key: np.frombuffer(value, self.field_dtypes[key]) for key, value in raw.items()}
        labels = np.full(len(fields['input_ids']), -100, np.int64)
        labels[fields['masked_lm_positions']] = fields['masked_lm_ids']
        return {'input_ids': fields['input_ids'].copy(),
                'token_type_ids': fields['segment_ids'].copy(),
                'attention_mask': fields['input_mask'].copy(), 'labels': labels}
