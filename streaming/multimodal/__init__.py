"""Streaming multimodal datasets: WebVid (videos inside the shards or as separate files)."""

from streaming.multimodal.webvid import (
    StreamingInsideWebVid,
    StreamingOutsideDTWebVid,
    StreamingOutsideGIWebVid,
)

__all__ = ['StreamingInsideWebVid', 'StreamingOutsideDTWebVid', 'StreamingOutsideGIWebVid']
