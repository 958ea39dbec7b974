"""Exceptions raised for bad input, each a subclass of a builtin users already catch."""

import json


class StreamingError(Exception):
    """Base class of every error this library raises on purpose."""


class IndexFileError(StreamingError, ValueError):
    """An ``index.json`` is missing, malformed, or of a version we cannot read."""


class MissingIndexError(IndexFileError, FileNotFoundError):
    """There is no ``index.json`` where one is needed (a FileNotFoundError, as in the reference)."""


class MissingLocalIndexError(MissingIndexError, RuntimeError):
    """No local ``index.json`` and no remote to fetch it from (the reference's RuntimeError)."""


class MissingPartitionIndexError(MissingIndexError, RuntimeError):
    """A partition index given to ``merge_index`` is not there (the reference's RuntimeError)."""


class CorruptIndexError(IndexFileError, json.JSONDecodeError):
    """An ``index.json`` that is not valid JSON; also the ``json.JSONDecodeError`` it is."""

    def __init__(self, message: str, doc: str = '', pos: int = 0) -> None:
        json.JSONDecodeError.__init__(self, message, doc, pos)
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple:
        return type(self), (self.args[0], self.doc, self.pos)


class EmptyIndexError(IndexFileError, RuntimeError):
    """A dataset whose indexes list no shards at all (also the reference's RuntimeError)."""


class ShardFileError(StreamingError, ValueError):
    """A shard file is truncated, corrupt, or disagrees with its index entry."""


class MissingShardFileError(ShardFileError, FileNotFoundError):
    """A shard file named by the index is not there (also a FileNotFoundError, as before)."""

    __str__ = ValueError.__str__  # Not OSError's "[Errno ...]" form.


class UnsafeEncodingError(StreamingError, ValueError):
    """A dataset has columns whose decoding can run arbitrary code (``pkl``), not allowed."""


class EncodingError(StreamingError, ValueError):
    """A column encoding name is unknown or a value cannot be encoded with it."""


class ColumnTypeError(StreamingError, TypeError, AttributeError):
    """A column value of the wrong Python type for its encoding (a writer's ``write``).

    A ``TypeError``, and also the ``AttributeError`` the reference raises for it, so handlers
    written for either keep working.
    """


class ColumnMismatchError(StreamingError, ValueError, KeyError):
    """A sample lacks some of the writer's columns or has extra ones.

    Also a ``KeyError``, which is what the reference raises, so existing handlers keep working.
    """

    __str__ = ValueError.__str__  # KeyError would quote the message.


class OutputError(StreamingError, OSError):
    """A writer's or cache's output cannot be written: unwritable directory, full disk, ...

    An ``OSError`` (its ``errno`` is the cause's), with a message naming the path and the
    parameter that chose it.
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno  # type: ignore[misc]

    __str__ = ValueError.__str__  # The message alone, not OSError's "[Errno ...]" form.


class OutputLockedError(OutputError):
    """Another writer holds the output directory: two writers would mix their shards."""


class StaleSourceError(ShardFileError):
    """A data file (Parquet, JSONL, tar, Arrow) changed since its index was built."""


class SourceFileError(ShardFileError):
    """A data file streamed as it is (Parquet, JSONL, tar, Arrow) is truncated or corrupt."""


class SchemaMismatchError(StreamingError, ValueError):
    """Files streamed together disagree on a column: one lacks it or gives it another type."""
