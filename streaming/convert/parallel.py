"""Write one dataset with several processes: each writes a sub-dataset, then the indexes merge.

Reading, building and encoding samples is Python work that one process does on one core (its
writer compresses and hashes finished shards on a thread pool). ``write_parallel`` spreads it
over ``workers`` processes, each writing ``out/part-NNNNN/`` with its own writer, then calls
``merge_index`` so ``out/index.json`` lists every part's shards. Readers see one dataset; the
shards are the same as a single writer's, only grouped by part.

Workers are started with ``spawn`` (safe with threads in the caller, unlike ``fork``). Starting
one costs a Python start and the writer's imports (numpy and the writers, not torch; measured in
docs/convert.md), so the calling process writes part 0 itself while the workers start.

The source is either

- a **callable** ``source(part, parts) -> iterable of samples``: part 0 runs in the calling
  process, parts 1.. in worker processes (no samples go between processes; it must be
  picklable, e.g. a module-level function or a ``functools.partial`` of one). The merged
  dataset holds part 0's samples, then part 1's, ...;
- or any **iterable** of samples, read by the parent and dealt to the workers in chunks of
  ``chunk_size`` (chunk ``i`` goes to part ``i % workers``, so the merged order is by part).

Example::

    from streaming.convert import write_parallel

    def shard_of_docs(part, parts):
        for i in range(part, 1_000_000, parts):
            yield {'id': i, 'text': f'document {i}'}

    write_parallel(shard_of_docs, '/data/docs', columns={'id': 'int', 'text': 'str'},
                   workers=4, compression='zstd')
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Iterable
from itertools import islice
from typing import Any, Callable, Sequence, Union

from streaming.merge import merge_index
from streaming.storage.registry import is_remote_url

__all__ = ['write_parallel']

Source = Union[Callable[[int, int], Iterable[dict]], Iterable[dict]]
_DONE = None  # End-of-input marker on a worker's queue.


def _writer_class(writer: str) -> type:
    from streaming import writing
    classes = {'mds': writing.MDSWriter, 'json': writing.JSONWriter, 'csv': writing.CSVWriter,
               'tsv': writing.TSVWriter, 'xsv': writing.XSVWriter}
    if writer not in classes:
        raise ValueError(f'writer must be one of {sorted(classes)}, got {writer!r}.')
    return classes[writer]


def _part_out(out: str | Sequence[str], part: int, scratch: str | None) -> str | tuple[str, str]:
    name = f'part-{part:05}'
    if isinstance(out, str) and not is_remote_url(out):
        return os.path.join(out, name)
    remote = out if isinstance(out, str) else out[1]
    local = scratch if isinstance(out, str) else out[0]
    return (os.path.join(local, name), remote.rstrip('/') + '/' + name)  # type: ignore[arg-type]


def _samples_from_queue(inbox: Any) -> Iterable[dict]:
    while True:
        chunk = inbox.get()
        if chunk is _DONE:
            return
        yield from chunk


class _Stopped(Exception):
    """Raised in the calling process's own part when a worker has failed."""


def _write_part(samples: Iterable[dict], out: Any, writer: str, kwargs: dict[str, Any],
                counter: Any, stop: Any = None) -> None:
    """Write one part, adding to ``counter`` every 256 samples; ``stop`` (an Event) aborts it."""
    pending = 0
    with _writer_class(writer)(out=out, **kwargs) as w:
        for sample in samples:
            w.write(sample)
            pending += 1
            if pending == 256:
                with counter.get_lock():
                    counter.value += pending
                pending = 0
                if stop is not None and stop.is_set():
                    raise _Stopped
    with counter.get_lock():
        counter.value += pending


def _worker(part: int, parts: int, source: Any, inbox: Any, out: Any, writer: str,
            kwargs: dict[str, Any], counter: Any, results: Any) -> None:
    """Write one part; report ('ok', part) or ('error', part, traceback) on ``results``."""
    try:
        samples = source(part, parts) if inbox is None else _samples_from_queue(inbox)
        _write_part(samples, out, writer, kwargs, counter)
        results.put(('ok', part, ''))
    except BaseException:  # Reported to the parent, which raises.
        results.put(('error', part, traceback.format_exc()))


def _put(inbox: Any, item: Any, proc: Any, stop: Any) -> bool:
    """Put ``item`` in a worker's inbox, waiting while it is full; False if the run failed."""
    while True:
        try:
            inbox.put(item, timeout=0.5)
            return True
        except queue.Full:
            if stop.is_set() or not proc.is_alive():
                return False


def _feed(source: Iterable[dict], inboxes: list[Any], chunk_size: int, procs: list[Any],
          stop: Any) -> None:
    """Deal ``source`` in chunks to the workers' inboxes, then end each inbox."""
    it = iter(source)
    i = 0
    while True:
        chunk = list(islice(it, chunk_size))
        if not chunk:
            break
        if not _put(inboxes[i % len(inboxes)], chunk, procs[i % len(procs)], stop):
            return
        i += 1
    for inbox, proc in zip(inboxes, procs):
        if not _put(inbox, _DONE, proc, stop):
            return


def write_parallel(source: Source, out: str | Sequence[str], *, columns: dict[str, str],
                   workers: int | None = None, writer: str = 'mds', progress_bar: bool = True,
                   total: int | None = None, chunk_size: int = 1000, keep_local: bool = False,
                   **writer_kwargs: Any) -> list[str]:
    """Write ``source`` as one dataset at ``out`` using ``workers`` processes (see the module doc).

    Args:
        source: ``source(part, parts) -> samples`` (part 0 in this process, the others in
            workers) or an iterable of samples (read here, dealt to ``workers`` workers).
        out: local directory, remote URL, or ``(local, remote)`` pair, as for the writers.
        columns: the writer's ``columns``.
        workers: parts written at once, each by its own process (default: the number of CPUs).
        writer: ``'mds'`` (default), ``'json'``, ``'csv'``, ``'tsv'`` or ``'xsv'``.
        progress_bar: one bar for all workers, on stderr.
        total: expected number of samples, for the bar (taken from ``len(source)`` if it has one).
        chunk_size: samples per chunk when dealing an iterable to the workers.
        keep_local: keep the local copies when writing to a remote.
        writer_kwargs: further writer arguments (``compression``, ``hashes``, ``size_limit``...).

    Returns:
        The part directory names, in merge order.

    """
    parts = workers or os.cpu_count() or 1
    if parts < 1:
        raise ValueError(f'workers must be at least 1, got {workers}.')
    if 'out' in writer_kwargs:
        raise ValueError('write_parallel takes out as its own argument.')
    _writer_class(writer)
    if total is None and hasattr(source, '__len__') and not callable(source):
        total = len(source)  # type: ignore[arg-type]
    scratch = None
    if isinstance(out, str) and is_remote_url(out):
        import tempfile
        scratch = tempfile.mkdtemp(prefix='write-parallel-')
    local_root = out if isinstance(out, str) and scratch is None else (scratch or out[0])
    if os.path.isdir(local_root) and os.listdir(local_root) and \
            not writer_kwargs.get('exist_ok', False):
        raise FileExistsError(f'Output directory {local_root} is not empty; pass exist_ok=True '
                              f'to overwrite it.')
    kwargs = {'columns': columns, 'keep_local': True, **writer_kwargs}
    _run_parts(source, parts, [_part_out(out, k, scratch) for k in range(parts)], writer,
               kwargs, total, chunk_size, progress_bar)
    names = [f'part-{k:05}' for k in range(parts)]
    index_files = [_index_location(_part_out(out, k, scratch)) for k in range(parts)]
    merge_index(index_files, out, keep_local=True)
    if not isinstance(index_files[0], str) and not keep_local:
        import shutil
        for location in index_files:  # The parts are on the remote: drop the local copies.
            shutil.rmtree(os.path.dirname(location[0]), ignore_errors=True)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return names


def _run_parts(source: Source, parts: int, outs: list[Any], writer: str, kwargs: dict[str, Any],
               total: int | None, chunk_size: int, progress_bar: bool) -> None:
    """Write every part: part 0 here for a callable source, the rest in worker processes."""
    import threading
    dealt = not callable(source)
    here = not dealt  # This process writes part 0 while the workers start.
    ctx = multiprocessing.get_context('spawn')  # Safe with threads in the caller, unlike fork.
    counter = ctx.Value('q', 0)
    results = ctx.Queue()
    inboxes = [ctx.Queue(maxsize=4) for _ in range(parts)] if dealt else [None] * parts
    procs = [ctx.Process(target=_worker, name=f'write-parallel-{k}',
                         args=(k, parts, None if dealt else source, inboxes[k], outs[k], writer,
                               kwargs, counter, results))
             for k in range(1 if here else 0, parts)]
    for proc in procs:
        proc.start()
    bar = None
    if progress_bar:
        from tqdm import tqdm
        bar = tqdm(total=total, desc=f'Writing {parts} parts', unit='sample')
    outcomes: list[tuple[str, int, str]] = []
    stop, fed = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_wait, daemon=True,
                               args=(procs, results, counter, bar, outcomes, stop, fed))
    watcher.start()
    try:
        if dealt:
            _feed(source, inboxes, chunk_size, procs, stop)
        else:
            try:
                _write_part(source(0, parts), outs[0], writer, kwargs, counter, stop)
            except _Stopped:
                pass  # A worker failed: its error is raised below.
            except Exception as error:
                raise RuntimeError(f'write_parallel: part 0 of {parts} failed: {error}') \
                    from error
        fed.set()
        watcher.join()
    finally:
        stop.set()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join()
        watcher.join()
        if bar is not None:
            bar.close()
    failed = [(part, text) for status, part, text in outcomes if status != 'ok']
    if failed:
        part, text = failed[0]
        raise RuntimeError(f'write_parallel: part {part} of {parts} failed:\n{text}')


def _index_location(part_out: str | tuple[str, str]) -> str | tuple[str, str]:
    if isinstance(part_out, str):
        return os.path.join(part_out, 'index.json')
    return (os.path.join(part_out[0], 'index.json'), part_out[1] + '/index.json')


def _wait(procs: list[Any], results: Any, counter: Any, bar: Any,
          outcomes: list[tuple[str, int, str]], stop: Any, fed: Any) -> None:
    """Collect one outcome per worker into ``outcomes``, updating the bar (run as a thread).

    Runs until every worker has reported and ``fed`` is set (the caller's own part or feeding is
    done). A worker that dies without reporting fails. The first failure sets ``stop``, which
    ends the caller's own part and the feeding; the caller sets ``stop`` to end this early.
    """
    shown = 0
    while not stop.is_set() and (len(outcomes) < len(procs) or not fed.is_set()):
        if len(outcomes) == len(procs):
            fed.wait(0.2)
        else:
            try:
                outcomes.append(results.get(timeout=0.2))
            except queue.Empty:
                _check_dead(procs, results, outcomes)
            if outcomes and outcomes[-1][0] != 'ok':
                stop.set()  # The others may wait for input forever; the caller stops them.
        if bar is not None and counter.value != shown:
            bar.update(counter.value - shown)
            shown = counter.value
    if bar is not None:
        bar.update(counter.value - shown)


def _check_dead(procs: list[Any], results: Any, outcomes: list[tuple[str, int, str]]) -> None:
    """Add an outcome for the first worker that exited with an error but reported nothing."""
    reported = {part for _, part, _ in outcomes}
    for proc in procs:
        part = int(proc.name.rsplit('-', 1)[1])
        if part not in reported and not proc.is_alive() and proc.exitcode not in (0, None):
            time.sleep(0.2)  # Its last message may still be in flight.
            try:
                outcomes.append(results.get_nowait())
            except queue.Empty:
                outcomes.append(('error', part, f'worker exited with code {proc.exitcode}'))
            return
