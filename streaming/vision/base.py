"""``StreamingVisionDataset``: image classification samples ``{'x': image, 'y': label}``.

torchvision is optional: without a ``transform`` an image becomes a float tensor in [0, 1]
(C x H x W) as torchvision's ``to_tensor`` makes it, computed with torch alone.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from streaming.base.legacy import LegacyDataset

__all__ = ['StandardTransform', 'StreamingVisionDataset', 'to_tensor']


def to_tensor(image: Any) -> Any:
    """A PIL image (or HxW[xC] array) as a ``float32`` tensor ``C x H x W``, 8-bit scaled to [0, 1].

    Other modes keep their values (``I;16``, ``I``, ``F``), as torchvision does.
    """
    import torch
    array = np.array(image, copy=True)
    if array.ndim == 2:
        array = array[:, :, None]
    tensor = torch.from_numpy(array).permute(2, 0, 1).contiguous()
    if array.dtype == np.uint8:
        return tensor.float().div(255)
    if array.dtype == np.bool_:
        return tensor.float()
    return tensor


class StandardTransform:
    """Apply ``transform`` to the input and ``target_transform`` to the label.

    Without ``transform`` the input goes through ``to_tensor``.
    """

    def __init__(self, transform: Callable | None = None,
                 target_transform: Callable | None = None) -> None:
        self.transform = transform
        self.target_transform = target_transform

    def __call__(self, x: Any, y: Any) -> tuple[Any, Any]:
        x = self.transform(x) if self.transform else to_tensor(x)
        if self.target_transform:
            y = self.target_transform(y)
        return x, y


class StreamingVisionDataset(LegacyDataset):
    """A streaming image dataset whose samples are ``(transformed x, transformed y)``.

    Pass either ``transforms`` (called as ``transforms(x, y)``) or ``transform`` and/or
    ``target_transform``, not both. Other arguments are ``StreamingDataset``'s, with the
    reference's older defaults (``partition_algo='orig'``, ``shuffle_algo='py1s'``).
    """

    def __init__(self, *, transforms: Callable | None = None, transform: Callable | None = None,
                 target_transform: Callable | None = None, **kwargs: Any) -> None:
        if transforms is not None and (transform is not None or target_transform is not None):
            raise ValueError('Pass transforms, or transform and/or target_transform, not both.')
        super().__init__(**kwargs)
        self.transform = transform
        self.target_transform = target_transform
        self.transforms = transforms or StandardTransform(transform, target_transform)

    def get_item(self, idx: int, retry: int = 7) -> Any:
        """Sample ``idx`` as ``transforms(x, y)``."""
        obj = super().get_item(idx, retry)
        return self.transforms(obj['x'], obj['y'])
