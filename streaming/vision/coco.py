"""COCO object detection as written by ``python -m streaming.vision.convert.coco``."""

from __future__ import annotations

from typing import Any, Callable

from streaming.base.legacy import LegacyDataset

__all__ = ['StreamingCOCO']


class StreamingCOCO(LegacyDataset):
    """Samples ``(image, image id, (height, width), box sizes, box labels)``.

    ``transform(image, (height, width), box sizes, box labels)``, if given, returns the last
    four transformed.
    """

    def __init__(self, *, transform: Callable | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.transform = transform

    def get_item(self, idx: int, retry: int = 7) -> Any:
        """Sample ``idx`` (the image in RGB)."""
        obj = super().get_item(idx, retry)
        image = obj['img'].convert('RGB')
        size = (obj['htot'], obj['wtot'])
        sizes, labels = obj['bbox_sizes'], obj['bbox_labels']
        if self.transform:
            image, size, sizes, labels = self.transform(image, size, sizes, labels)
        return image, obj['img_id'], size, sizes, labels
