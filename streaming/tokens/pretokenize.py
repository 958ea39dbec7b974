"""Pre-tokenizing documents into token shards: text, jsonl or parquet in, shards out.

Documents are read lazily (parquet in record batches through pyarrow, imported only then),
optionally shuffled through a bounded buffer, tokenized in worker processes in batches with a
bounded number in flight, and packed back to back, each followed by EOS, into a
``TokenShardWriter``. Memory stays bounded by the batch size, the number of batches in flight
and the shuffle buffer, whatever the dataset size.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from streaming.tokens.format import Manifest
from streaming.tokens.writer import TokenShardWriter

__all__ = ['pretokenize', 'read_documents']

Tokenizer = Callable[[str], Sequence[int]]


def read_documents(sources: str | os.PathLike | Sequence[str] | Iterable[str], *,
                   text_field: str = 'text') -> Iterator[str]:
    """The documents of ``sources``.

    A path or a list/tuple of paths: ``.txt`` (one document per line), ``.jsonl`` (the
    ``text_field`` of each object) or ``.parquet`` (the ``text_field`` column). Any other
    iterable (a generator, a dataset) yields the documents themselves. A missing file, field or
    column is an error naming the file.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [os.fspath(sources)]
    if not isinstance(sources, (list, tuple)):
        yield from sources
        return
    for source in sources:
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'pretokenize: no such source file: {path}')
        if path.endswith('.parquet'):
            yield from _parquet(path, text_field)
        elif path.endswith(('.jsonl', '.json')):
            yield from _jsonl(path, text_field)
        else:
            with open(path, encoding='utf-8') as f:
                for line in f:
                    line = line.rstrip('\n')
                    if line:
                        yield line


def _jsonl(path: str, field: str) -> Iterator[str]:
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[field]
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f'{path}, line {number}: no field {field!r} ({error}).') \
                    from None
            if not isinstance(text, str):
                raise ValueError(f'{path}, line {number}: field {field!r} is not a string.')
            yield text


def _parquet(path: str, column: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError('Reading parquet needs pyarrow: pip install "shardflow[tokens]".') \
            from error
    file = pq.ParquetFile(path)
    if column not in file.schema_arrow.names:
        raise ValueError(f'{path}: no column {column!r} (columns: {file.schema_arrow.names}).')
    for batch in file.iter_batches(batch_size=1024, columns=[column]):
        yield from (text for text in batch.column(0).to_pylist() if text)


def _shuffled(documents: Iterable[str], buffer: int, seed: int) -> Iterator[str]:
    """A bounded-buffer shuffle: each document leaves from a random slot of ``buffer``."""
    rng = random.Random(seed)
    pool: list[str] = []
    for document in documents:
        if len(pool) < buffer:
            pool.append(document)
            continue
        slot = rng.randrange(buffer)
        yield pool[slot]
        pool[slot] = document
    rng.shuffle(pool)
    yield from pool


def _batches(documents: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for document in documents:
        batch.append(document)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---- tokenizing (in workers) ------------------------------------------------------------------
_worker_tokenizer: Any = None


def _resolve(tokenizer: Any) -> Any:
    if isinstance(tokenizer, str):  # a tokenizer.json file of Hugging Face tokenizers
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError as error:
            raise ImportError('A tokenizer file needs the tokenizers package: pip install '
                              '"shardflow[tokens]".') from error
        return HFTokenizer.from_file(tokenizer)
    return tokenizer


def eos_and_name(tokenizer: Any, resolved: Any, eos_id: int | str, who: str) -> tuple[int, str]:
    """The EOS id (looked up when given as a token) and the tokenizer's name for the manifest."""
    if isinstance(eos_id, str):
        looked_up = resolved.token_to_id(eos_id) if hasattr(resolved, 'token_to_id') else None
        if looked_up is None:
            raise ValueError(f'{who}: eos_id {eos_id!r} is not a token of the tokenizer.')
        eos_id = looked_up
    return int(eos_id), tokenizer if isinstance(tokenizer, str) else type(resolved).__name__


def _encode(tokenizer: Any, texts: list[str]) -> list[Sequence[int]]:
    if hasattr(tokenizer, 'encode_batch'):  # Hugging Face tokenizers: its own threads
        return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    return [tokenizer(text) for text in texts]


def _pack(tokenizer: Any, texts: list[str], eos_id: int, dtype: str) -> np.ndarray:
    """One batch's documents, each followed by EOS, as one array."""
    pieces = []
    eos = np.array([eos_id], dtype=np.int64)
    for ids in _encode(tokenizer, texts):
        pieces += [np.asarray(ids, dtype=np.int64), eos]
    packed = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
    limit = np.iinfo(np.dtype(dtype)).max
    if packed.size and (packed.min() < 0 or packed.max() > limit):
        raise ValueError(f'pretokenize: the tokenizer produced id {int(packed.max())}, which '
                         f'does not fit dtype {dtype}; use dtype="uint32".')
    return packed.astype(dtype)


def _init(tokenizer: Any) -> None:
    global _worker_tokenizer
    _worker_tokenizer = _resolve(tokenizer)


def _work(args: tuple[list[str], int, str]) -> np.ndarray:
    return _pack(_worker_tokenizer, *args)


def pretokenize(sources: str | os.PathLike | Sequence[str] | Iterable[str], out: str, *,
                tokenizer: Any, eos_id: int | str, seq_len: int, shard_tokens: int,
                dtype: str = 'uint32', text_field: str = 'text', workers: int | None = None,
                batch_docs: int = 256, shuffle_buffer: int = 0, seed: int = 42,
                progress: bool = True, max_tokens: int | None = None,
                **writer_kwargs: Any) -> Manifest:
    """Tokenize ``sources`` into shards of ``shard_tokens`` tokens under ``out``.

    ``tokenizer``: a callable ``str -> list[int]`` (picklable when ``workers`` > 0), a Hugging
    Face ``tokenizers.Tokenizer``, or the path of a ``tokenizer.json``. ``eos_id``: the id
    appended after each document, or a token string looked up in the tokenizer.
    ``workers``: tokenizing processes (default: the CPU count; 0 tokenizes in this process).
    ``shuffle_buffer``: documents held for a bounded shuffle (0: keep the order).
    ``max_tokens``: stop after this many tokens. The rest goes to ``TokenShardWriter``
    (``out`` may be a remote URL). Returns the manifest.
    """
    resolved = _resolve(tokenizer)
    eos_id, name = eos_and_name(tokenizer, resolved, eos_id, 'pretokenize')
    documents: Iterable[str] = read_documents(sources, text_field=text_field)
    if shuffle_buffer:
        documents = _shuffled(documents, shuffle_buffer, seed)
    jobs = ((batch, int(eos_id), dtype) for batch in _batches(documents, batch_docs))
    workers = (os.cpu_count() or 1) if workers is None else workers
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(unit='tok', unit_scale=True, desc='pretokenize')
    writer = TokenShardWriter(out, seq_len=seq_len, shard_tokens=shard_tokens, dtype=dtype,
                              eos_id=int(eos_id), tokenizer=str(name), **writer_kwargs)
    try:
        for packed in _tokenized(jobs, resolved, tokenizer, workers):
            if max_tokens is not None:
                packed = packed[:max(0, max_tokens - writer.total_tokens)]
            writer.write(packed)
            if bar is not None:
                bar.update(len(packed))
            if max_tokens is not None and writer.total_tokens >= max_tokens:
                break
    except BaseException:
        writer.__exit__(RuntimeError, None, None)
        raise
    finally:
        if bar is not None:
            bar.close()
    return writer.finish()


def _tokenized(jobs: Iterator[tuple[list[str], int, str]], resolved: Any, tokenizer: Any,
               workers: int) -> Iterator[np.ndarray]:
    """Packed batches in order; at most ``2 * workers`` batches in flight."""
    if workers <= 0:
        for job in jobs:
            yield _pack(resolved, *job)
        return
    method = 'fork' if 'fork' in multiprocessing.get_all_start_methods() else 'spawn'
    context = multiprocessing.get_context(method)
    with context.Pool(workers, initializer=_init, initargs=(tokenizer,)) as pool:
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.apply_async(_work, (job,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
