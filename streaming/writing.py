"""The public writers: the format layer's shard writers, with uploads to a remote attached.

``streaming.format`` encodes and writes shards to a local directory and calls ``on_file_done``
with each finished file. This module sits above both ``format`` and ``storage``: it resolves a
writer's ``out`` (a local directory, a remote URL, or a ``(local, remote)`` pair) with a
``streaming.storage.Uploader`` and uploads each file as the writer finishes it. These are the
classes ``streaming.MDSWriter`` and co. name, with the reference's signatures.

To give a writer of your own shard format the same ``out`` handling, put ``UploadingWriter``
first among its bases: ``class MyWriter(UploadingWriter, MyLocalWriter)``.
"""

from __future__ import annotations

import os
from typing import Any

from streaming.errors import OutputError
from streaming.format import json as json_format
from streaming.format import mds as mds_format
from streaming.format import xsv as xsv_format
from streaming.format.writer import (
    DataMetaShardWriter,
    SingleFileShardWriter,
    Writer,
)
from streaming.storage.registry import is_remote_url
from streaming.storage.upload import Uploader

__all__ = ['UploadingWriter', 'MDSWriter', 'JSONWriter', 'CSVWriter', 'TSVWriter', 'XSVWriter',
           'JointWriter', 'SplitWriter']

# The options a public writer takes through ``**kwargs``, with their defaults.
_OPTIONS = {'progress_bar': False, 'max_workers': None, 'retry': 2, 'exist_ok': False}


def _options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The extra writer options, checked: an unknown one is a ValueError naming it."""
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise ValueError(f'Unknown writer argument(s) {unknown}; the extra options are '
                         f'{sorted(_OPTIONS)}.')
    return kwargs


class UploadingWriter(Writer):
    """A writer whose ``out`` may be remote: each finished file is uploaded, then the index.

    ``keep_local`` keeps the local copies when there is a remote; ``retry`` is the number of
    extra upload attempts per file; ``exist_ok`` lets a non-empty local directory be emptied
    and reused. Every other argument goes to the format's writer.
    """

    def __init__(self, *, out: str | tuple[str, str], keep_local: bool = False, retry: int = 2,
                 exist_ok: bool = False, **kwargs: Any) -> None:
        self._upload_args = {'keep_local': keep_local, 'retry': retry, 'exist_ok': exist_ok,
                             'progress_bar': kwargs.get('progress_bar', False)}
        super().__init__(out=out, **kwargs)

    def open_output(self, out: Any) -> str:
        """Resolve ``out`` with an ``Uploader`` and upload every file the writer finishes."""
        args = self._upload_args
        local = out if isinstance(out, str) and not is_remote_url(out) else \
            out[0] if isinstance(out, (tuple, list)) and len(out) == 2 and \
            all(isinstance(x, str) for x in out) else None
        if local is not None and os.path.isdir(local):
            # Before the Uploader may empty it (exist_ok): never under another writer's feet.
            self._out_lock.acquire(local)
        try:
            self.uploader = Uploader(out, args['keep_local'], args['retry'], args['exist_ok'],
                                     progress_bar=args['progress_bar'])
        except (FileExistsError, ValueError):
            raise  # A non-empty directory without exist_ok, or a malformed out.
        except OSError as error:
            raise OutputError(f'out={local!r} cannot be created or emptied: '
                              f'{error.strerror or error}.', error.errno) from None
        self.keep_local = args['keep_local']
        self.remote = self.uploader.remote
        given = self.on_file_done  # A hook given by the caller runs after each upload.
        upload = self.uploader.upload_file

        def upload_then_call(basename: str) -> None:
            upload(basename)
            if given is not None:
                given(basename)

        self.on_file_done = upload_then_call
        return self.uploader.local

    @property
    def shards(self) -> list[dict[str, Any]]:
        """The index entries of every shard flushed so far (the reference's attribute).

        Shards are compressed and written on a thread pool; this waits for the ones already
        flushed, so the list is what the reference's synchronous writer would hold.
        """
        self._collect_all()
        return self._shards

    @property
    def cloud_writer(self) -> Uploader:
        """The uploader that sends each finished file to the remote (``upload_file(basename)``)."""
        return self.uploader

    def finish(self) -> None:
        """Write the last shard and the index, upload them, and drop a temporary staging dir."""
        if self._finished:
            return
        super().finish()
        self.uploader.finish()


class MDSWriter(UploadingWriter, mds_format.MDSWriter):
    """Writes MDS shards to ``out``; ``columns`` maps each column name to its MDS encoding.

    ``kwargs`` may set ``progress_bar``, ``max_workers``, ``retry`` and ``exist_ok``.
    """

    def __init__(self, *, columns: dict[str, str], out: str | tuple[str, str],
                 keep_local: bool = False, compression: str | None = None,
                 hashes: list[str] | None = None, size_limit: int | str | None = 1 << 26,
                 **kwargs: Any) -> None:
        super().__init__(columns=columns, out=out, keep_local=keep_local, compression=compression,
                         hashes=hashes, size_limit=size_limit, **_options(kwargs))


class _NewlineWriter(UploadingWriter):
    """The signature shared by JSON, CSV and TSV writers: columns and a newline."""

    def __init__(self, *, columns: dict[str, str], newline: str = '\n',
                 out: str | tuple[str, str], keep_local: bool = False,
                 compression: str | None = None, hashes: list[str] | None = None,
                 size_limit: int | str | None = 1 << 26, **kwargs: Any) -> None:
        super().__init__(columns=columns, newline=newline, out=out, keep_local=keep_local,
                         compression=compression, hashes=hashes, size_limit=size_limit,
                         **_options(kwargs))


class JSONWriter(_NewlineWriter, json_format.JSONWriter):
    """Writes JSON-lines shards to ``out``; ``columns`` maps names to 'str', 'int' or 'float'.

    ``kwargs`` may set ``progress_bar``, ``max_workers``, ``retry`` and ``exist_ok``.
    """


class XSVWriter(UploadingWriter, xsv_format.XSVWriter):
    """Writes separated-values shards to ``out``, fields joined by ``separator``."""

    def __init__(self, *, columns: dict[str, str], separator: str, newline: str = '\n',
                 out: str | tuple[str, str], keep_local: bool = False,
                 compression: str | None = None, hashes: list[str] | None = None,
                 size_limit: int | str | None = 1 << 26, **kwargs: Any) -> None:
        super().__init__(columns=columns, separator=separator, newline=newline, out=out,
                         keep_local=keep_local, compression=compression, hashes=hashes,
                         size_limit=size_limit, **_options(kwargs))


class CSVWriter(_NewlineWriter, xsv_format.CSVWriter):
    """Writes comma-separated shards to ``out``."""


class TSVWriter(_NewlineWriter, xsv_format.TSVWriter):
    """Writes tab-separated shards to ``out``."""


class JointWriter(UploadingWriter, SingleFileShardWriter):
    """The reference's base of one-file shard writers (MDS), with uploads."""


class SplitWriter(UploadingWriter, DataMetaShardWriter):
    """The reference's base of data-plus-meta shard writers (JSON, CSV, ...), with uploads."""
