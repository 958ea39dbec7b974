"""ADE20K semantic segmentation as written by ``python -m streaming.vision.convert.ade20k``."""

from __future__ import annotations

from typing import Any, Callable

from streaming.base.legacy import LegacyDataset

__all__ = ['StreamingADE20K']


class StreamingADE20K(LegacyDataset):
    """Samples ``(image, annotation)``.

    ``joint_transform((x, y))`` runs first, then ``transform(x)`` and ``target_transform(y)``,
    each if given.
    """

    def __init__(self, *, joint_transform: Callable | None = None,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.joint_transform = joint_transform
        self.transform = transform
        self.target_transform = target_transform

    def get_item(self, idx: int, retry: int = 7) -> tuple[Any, Any]:
        """Sample ``idx`` as ``(image, annotation)`` after the transforms."""
        obj = super().get_item(idx, retry)
        x, y = obj['x'], obj['y']
        if self.joint_transform:
            x, y = self.joint_transform((x, y))
        if self.transform:
            x = self.transform(x)
        if self.target_transform:
            y = self.target_transform(y)
        return x, y
