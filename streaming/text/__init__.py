"""Streaming text datasets: C4, English Wikipedia and the Pile (transformers optional)."""

from streaming.text.c4 import StreamingC4
from streaming.text.enwiki import StreamingEnWiki
from streaming.text.pile import StreamingPile

__all__ = ['StreamingC4', 'StreamingEnWiki', 'StreamingPile']
