"""Where shards live: one small module per URL scheme, looked up through ``registry``."""

from streaming.storage.registry import Backend, get_backend, parse_url, register_backend
from streaming.storage.upload import Uploader

__all__ = ['Backend', 'Uploader', 'get_backend', 'parse_url', 'register_backend']
