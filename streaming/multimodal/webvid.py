"""WebVid video-text datasets: videos stored inside the shards, or as files outside them."""

from __future__ import annotations

import os
from typing import Any

from streaming.base.constant import TICK
from streaming.base.storage.download import CloudDownloader
from streaming.dataset.dataset import StreamingDataset
from streaming.storage.download import download_file

__all__ = ['CloudDownloader', 'StreamingDataset', 'StreamingInsideWebVid',
           'StreamingOutsideDTWebVid', 'StreamingOutsideGIWebVid', 'TICK']


class StreamingInsideWebVid(StreamingDataset):
    """WebVid with each video's bytes in the shards (column ``content``)."""


class StreamingOutsideGIWebVid(StreamingDataset):
    """WebVid with videos stored as files under ``extra_remote``, one per sample.

    Each sample's ``content_path`` names its file; ``get_item`` fetches it into ``extra_local``
    (once) and returns it as ``content``.
    """

    def __init__(self, *, extra_local: str | None = None, extra_remote: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault('partition_algo', 'orig')
        kwargs.setdefault('shuffle_algo', 'py1s')
        kwargs.setdefault('shuffle_block_size', 1 << 18)
        super().__init__(**kwargs)
        self.extra_local = extra_local
        self.extra_remote = extra_remote

    def get_item(self, idx: int, retry: int = 7) -> Any:
        """Sample ``idx`` with its video file's bytes as ``content``."""
        obj = super().get_item(idx, retry)
        if self.extra_local and self.extra_remote:
            rel_path = obj['content_path']
            local = os.path.join(self.extra_local, rel_path)
            if not os.path.exists(local):
                remote = self.extra_remote.rstrip('/') + '/' + rel_path.lstrip('/')
                stream = self.streams[0]  # Its download settings apply to the videos too.
                download_file(remote, local, retries=stream.download_retry,
                              timeout=stream.download_timeout)
            with open(local, 'rb') as f:
                obj['content'] = f.read()
        return obj


class StreamingOutsideDTWebVid(StreamingOutsideGIWebVid):
    """As ``StreamingOutsideGIWebVid``.

    The reference meant to fetch the videos in its download thread ("DT"), but that override is
    never called there, so the files are fetched in ``get_item`` in both.
    """
