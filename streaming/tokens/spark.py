"""Pre-tokenizing on a Spark cluster: the same shards, sidecars and manifest as ``pretokenize``.

Two jobs. First, every partition is tokenized in its executor (each document followed by EOS,
exactly as ``pretokenize`` packs it) and its tokens are streamed to one staging file,
``part-{partition:05d}.bin``; the driver collects only the token count of each partition.
The partitions' offsets in the whole token stream follow from the counts, in partition order,
so shard ``s`` is tokens ``[s * shard_tokens, (s + 1) * shard_tokens)`` of that stream, as on
one machine. Second, one task per shard reads its range from the staging files and writes it
with ``TokenShardWriter(first_shard=s)`` (sidecar, checksums, atomic publication, upload for a
remote ``out``); the driver writes ``manifest.json`` from the shards' entries, last.

Staging is a directory every executor can reach (a shared filesystem; any directory in local
mode), or an object-store URL: executors then upload their parts and the shard tasks read their
ranges with ranged GETs. pyspark is imported by the caller, never by this module.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import asdict
from typing import Any, Iterator

import numpy as np

from streaming.tokens.format import MANIFEST, FileEntry, Manifest, ShardEntry, token_dtype

__all__ = ['pretokenize_spark']

_READ = 1 << 22  # Tokens read from staging at a time.


def pretokenize_spark(documents: Any, out: str, *, tokenizer: Any, eos_id: int | str,
                      seq_len: int, shard_tokens: int, dtype: str = 'uint32',
                      text_field: str = 'text', batch_docs: int = 256,
                      staging: str | None = None, prefix: str = 'train',
                      hashes: tuple[str, ...] = ('xxh3_128',), ids: bool = True) -> Manifest:
    """Tokenize a Spark DataFrame (its ``text_field`` column) or an RDD of strings into shards.

    The output is byte-identical to ``pretokenize`` run on the same documents in the same
    order (partition 0 first) with ``shuffle_buffer=0`` and no ``max_tokens``: same shard
    numbering, bytes, sidecars and manifest. Null documents are skipped; an empty string is a
    document of no tokens (its EOS only), as in ``pretokenize`` over an iterable.
    ``tokenizer``: the path of a ``tokenizer.json`` readable on every executor, a
    ``tokenizers.Tokenizer`` or a picklable callable. ``staging``: a directory every executor
    can read and write, or a URL of the storage layer (default ``out/.staging-<id>`` for a
    local ``out``; required for a remote one). A staging directory is removed at the end; the
    objects under a staging URL are left for the caller to delete (the storage layer does not
    delete). Returns the manifest.
    """
    from streaming.storage.registry import is_remote_url
    from streaming.tokens.pretokenize import _resolve, eos_and_name
    if shard_tokens <= 0 or seq_len <= 0 or shard_tokens % seq_len:
        raise ValueError(f'pretokenize_spark: shard_tokens ({shard_tokens}) must be a positive '
                         f'multiple of seq_len ({seq_len}).')
    token_dtype(dtype, 'pretokenize_spark dtype')
    remote = is_remote_url(out)
    if staging is None:
        if remote:
            raise ValueError(f'pretokenize_spark: out={out!r} is remote, so pass staging=, a '
                             f'directory every executor can reach (e.g. on a shared '
                             f'filesystem).')
        staging = os.path.join(out, f'.staging-{uuid.uuid4().hex[:8]}')
    eos_id, name = eos_and_name(tokenizer, _resolve(tokenizer), eos_id, 'pretokenize_spark')
    rdd = _texts(documents, text_field)
    staged_remotely = is_remote_url(staging)
    if not staged_remotely:
        os.makedirs(staging, exist_ok=True)
    try:
        job = (tokenizer, int(eos_id), dtype, batch_docs, staging)
        counts = dict(rdd.mapPartitionsWithIndex(
            lambda index, texts: _tokenize_partition(job, index, texts)).collect())
        lengths = [counts.get(i, 0) for i in range(rdd.getNumPartitions())]
        starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).tolist()
        total = starts[-1]
        num_shards = -(-total // shard_tokens)
        layout = (staging, starts, dtype, shard_tokens, total)
        writer = dict(seq_len=seq_len, shard_tokens=shard_tokens, dtype=dtype, prefix=prefix,
                      eos_id=int(eos_id), tokenizer=str(name), hashes=hashes, ids=ids)
        entries = []
        if num_shards:
            tasks = rdd.context.parallelize(range(num_shards), min(num_shards, max(
                1, rdd.context.defaultParallelism)))
            entries = tasks.map(lambda s: _write_shard(layout, writer, out, s)).collect()
        shards = sorted((_entry(e) for e in entries), key=lambda e: e.index)
        manifest = Manifest(token_dtype(dtype, 'dtype').name, seq_len, shards, prefix,
                            int(eos_id), str(name))
        _publish_manifest(out, manifest)
        return manifest
    finally:
        if not staged_remotely:
            shutil.rmtree(staging, ignore_errors=True)


def _texts(documents: Any, field: str) -> Any:
    """An RDD of strings from a DataFrame column or an RDD."""
    if hasattr(documents, 'select') and hasattr(documents, 'columns'):
        if field not in documents.columns:
            raise ValueError(f'pretokenize_spark: the DataFrame has no column {field!r} '
                             f'(columns: {documents.columns}).')
        return documents.select(field).rdd.map(lambda row: row[0])
    if hasattr(documents, 'mapPartitionsWithIndex'):
        return documents
    raise TypeError(f'pretokenize_spark: documents must be a Spark DataFrame or RDD, got '
                    f'{type(documents).__name__}; use pretokenize for local sources.')


def _tokenize_partition(job: tuple, index: int, texts: Iterator[Any]) -> Iterator[tuple]:
    """In an executor: tokenize one partition into ``part-{index:05d}.bin``; yield its count."""
    import tempfile

    from streaming.fileio import publish
    from streaming.storage.registry import is_remote_url
    from streaming.tokens.pretokenize import _pack, _resolve
    tokenizer, eos_id, dtype, batch_docs, staging = job
    resolved = _resolve(tokenizer)
    path = _part(staging, index)
    remote = is_remote_url(staging)
    temp = tempfile.mkstemp(suffix='.tmp', prefix='token-part-')[1] if remote else \
        f'{path}.{uuid.uuid4().hex[:8]}.tmp'
    count = 0
    with open(temp, 'wb') as f:
        batch: list[str] = []
        for text in texts:
            if text is None:
                continue
            if not isinstance(text, str):
                raise ValueError(f'pretokenize_spark: partition {index} holds a document of '
                                 f'type {type(text).__name__}, not a string.')
            batch.append(text)
            if len(batch) == batch_docs:
                count += _flush(f, _pack(resolved, batch, eos_id, dtype))
                batch = []
        if batch:
            count += _flush(f, _pack(resolved, batch, eos_id, dtype))
    if remote:
        from streaming.storage import upload_file
        try:
            upload_file(temp, path)
        finally:
            os.remove(temp)
    else:
        publish(temp, path)
    yield index, count


def _part(staging: str, index: int) -> str:
    name = f'part-{index:05d}.bin'
    from streaming.storage.registry import is_remote_url
    return f'{staging.rstrip("/")}/{name}' if is_remote_url(staging) else \
        os.path.join(staging, name)


def _ranges(path: str, dtype: np.dtype, first: int, count: int) -> Iterator[np.ndarray]:
    """Tokens ``first .. first + count - 1`` of a staged part, a bounded piece at a time."""
    from streaming.storage.registry import is_remote_url
    if not is_remote_url(path):
        for lo in range(first, first + count, _READ):
            yield np.fromfile(path, dtype, min(_READ, first + count - lo),
                              offset=lo * dtype.itemsize)
        return
    from streaming.storage import get_backend
    size = dtype.itemsize
    response = get_backend(path).read(path, first * size, (first + count) * size, timeout=60.0)
    rest, got = b'', 0
    for chunk in response.chunks:
        data = rest + chunk
        whole = len(data) - len(data) % size
        rest = data[whole:]
        if whole:
            got += whole // size
            yield np.frombuffer(data[:whole], dtype)
    if rest or got != count:  # A short body: fail the task (Spark retries it).
        raise OSError(f'{path}: a ranged read of {count} tokens from token {first} returned '
                      f'{got * size + len(rest)} of {count * size} bytes.')


def _flush(f: Any, packed: np.ndarray) -> int:
    f.write(np.ascontiguousarray(packed).astype(packed.dtype.newbyteorder('<')).tobytes())
    return len(packed)


def _write_shard(layout: tuple, writer_kwargs: dict, out: str, shard: int) -> dict:
    """In an executor: write shard ``shard`` from the staged partitions; its manifest entry."""
    from streaming.tokens.writer import TokenShardWriter
    staging, starts, dtype, shard_tokens, total = layout
    dtype = np.dtype(dtype).newbyteorder('<')
    begin, end = shard * shard_tokens, min(total, (shard + 1) * shard_tokens)
    writer = TokenShardWriter(out, first_shard=shard, manifest=False, **writer_kwargs)
    with writer:
        for part in range(len(starts) - 1):
            lo, hi = max(begin, starts[part]), min(end, starts[part + 1])
            if lo < hi:
                for data in _ranges(_part(staging, part), dtype, lo - starts[part], hi - lo):
                    writer.write(data)
    (entry,) = writer.shards
    return asdict(entry)


def _entry(body: dict) -> ShardEntry:
    ids = body.get('ids')
    return ShardEntry(body['index'], body['num_tokens'], FileEntry(**body['tokens']),
                      FileEntry(**ids) if ids else None)


def _publish_manifest(out: str, manifest: Manifest) -> None:
    from streaming.fileio import atomic_write
    from streaming.storage.registry import is_remote_url
    if not is_remote_url(out):
        atomic_write(os.path.join(out, MANIFEST), manifest.to_json())
        return
    import tempfile

    from streaming.storage import upload_file
    with tempfile.TemporaryDirectory(prefix='token-manifest-') as scratch:
        path = os.path.join(scratch, MANIFEST)
        atomic_write(path, manifest.to_json())
        upload_file(path, f'{out.rstrip("/")}/{MANIFEST}')
