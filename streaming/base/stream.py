"""The reference's ``streaming.base.stream``: ``Stream`` and ``streams_registry``.

``streams_registry`` is the registry ``StreamingDataset(stream_name=...)`` consults: register a
``Stream`` subclass with ``streams_registry.register('name', func=cls)``.
"""

from streaming.base.constant import TICK
from streaming.base.distributed import barrier, get_local_rank
from streaming.base.registry_utils import create_registry
from streaming.base.storage.download import CloudDownloader
from streaming.base.util import retry, wait_for_file_to_exist
from streaming.base.world import World
from streaming.dataset.stream import Stream, streams_registry
from streaming.format import Reader, reader_from_json
from streaming.format.compression import decompress
from streaming.format.hashing import get_hash
from streaming.format.index import FileInfo, get_index_basename

__all__ = ['CloudDownloader', 'FileInfo', 'Reader', 'Stream', 'TICK', 'World', 'barrier',
           'create_registry', 'decompress', 'get_hash', 'get_index_basename', 'get_local_rank',
           'reader_from_json', 'retry', 'streams_registry', 'wait_for_file_to_exist']
