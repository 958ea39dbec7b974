"""Worker-side helpers shared by every case script.

A case script runs in a fresh process with the python of one implementation's virtual env:
``ours`` (this repo's dev venv), ``reference`` (mosaicml-streaming 0.13.0) or ``litdata``. It
is started by path, so only ``benchmarks/cases`` is on ``sys.path`` (never the repo root, which
would shadow the reference's ``streaming`` package with ours). It reads its parameters from one
JSON argument and prints exactly one result line, ``BENCH_RESULT {json}``, which the runner parses.

A result is ``{"status": "ok", "metrics": {...}}``, ``{"status": "unsupported", "reason": ...}``
(the implementation cannot run this case yet: reported as such, never skipped silently) or
``{"status": "error", ...}``.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

RESULT_PREFIX = 'BENCH_RESULT '
IMPLS = ('ours', 'reference', 'litdata', 'machine')


class Unsupported(Exception):
    """The implementation cannot run this case (yet); the message says why."""


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def install_torchvision_stand_in() -> None:
    """Put a stand-in ``torchvision`` in ``sys.modules``: it cannot import on this CPU-only box.

    The reference imports torchvision at ``import streaming`` time (its vision datasets), but its
    format and dataset code never calls it.
    """
    class VisionDataset:  # noqa: D401 - a placeholder base class
        pass

    _stub('torchvision')
    _stub('torchvision.datasets', VisionDataset=VisionDataset)
    _stub('torchvision.transforms')
    _stub('torchvision.transforms.functional', to_tensor=lambda x: x)


# Public names resolved at import time, before any clock starts: ours imports them lazily (on
# first attribute access, pulling in torch), the reference and LitData eagerly, so without this
# ours would pay its imports inside the timed region.
_PRELOAD = ('MDSWriter', 'LocalDataset', 'StreamingDataset', 'StreamingDataLoader')


def import_impl(impl: str) -> types.ModuleType:
    """Import the implementation's top-level module (and its public classes), checked."""
    if impl == 'litdata':
        os.environ.setdefault('LITDATA_DISABLE_VERSION_CHECK', '1')  # No PyPI call at init.
        import litdata
        return litdata
    if impl == 'reference':
        install_torchvision_stand_in()
    import streaming
    version = getattr(streaming, '__version__', '?')
    if impl == 'reference' and version != '0.13.0':
        raise RuntimeError(f'expected mosaicml-streaming 0.13.0, imported {version} from '
                           f'{streaming.__file__}')
    if impl == 'ours' and 'site-packages/streaming' in (streaming.__file__ or ''):
        raise RuntimeError(f'expected our package, imported {streaming.__file__}')
    for name in _PRELOAD:
        try:
            getattr(streaming, name)
        except (AttributeError, ImportError):
            pass  # Reported as unsupported by the case that needs it.
    return streaming


def impl_version(impl: str) -> str:
    """The version string of the implementation (imports it)."""
    module = import_impl(impl)
    return str(getattr(module, '__version__', '?'))


def require(module: types.ModuleType, *names: str) -> list[Any]:
    """``getattr`` each public name, raising ``Unsupported`` if any is missing."""
    values = []
    for name in names:
        try:
            values.append(getattr(module, name))
        except (AttributeError, ImportError) as error:
            raise Unsupported(f'{module.__name__}.{name} is not available yet ({error})') \
                from None
    return values


def litdata_bytes(item: Any) -> Any:
    """LitData transform: turn the ``memoryview`` values it returns for bytes columns into bytes.

    LitData hands back a memoryview for a ``bytes`` value. torch's default collate treats a
    memoryview as a sequence and transposes it byte by byte (a batch of 256 samples of 2 KiB
    becomes 2048 tensors of 256 bytes), and it cannot be pickled across DataLoader workers. The
    other implementations return ``bytes``, so LitData gets the same (one copy per value, as
    they make).
    """
    if isinstance(item, dict):
        return {key: bytes(value) if isinstance(value, memoryview) else value
                for key, value in item.items()}
    return item


_SHM_NAME = re.compile(r'\d{6}_\w+')  # The reference's /dev/shm names: 000000_locals, ...


def _streaming_shm_in_use() -> bool:
    """True if a live process maps one of the reference's shared memory blocks."""
    try:
        names = [n for n in os.listdir('/dev/shm') if _SHM_NAME.fullmatch(n)]
    except OSError:
        return False
    if not names:
        return False
    paths = [f'/dev/shm/{n}' for n in names]
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f'/proc/{pid}/maps') as f:
                maps = f.read()
        except OSError:
            continue
        if any(path in maps for path in paths):
            return True
    return False


def prepare_impl(impl: str) -> types.ModuleType:
    """Import the implementation and clear stale shared memory; call before any clock starts.

    The reference keeps each dataset's state in /dev/shm and its
    ``clean_stale_shared_memory()`` unlinks every such block, live or not. On a shared machine
    another process (a test driving the reference) may be using them, so it is called only when
    no live process maps any: stale blocks are cleared, live ones left alone (the reference then
    picks the next free prefix by itself).
    """
    module = import_impl(impl)
    if impl in ('ours', 'reference') and not _streaming_shm_in_use():
        try:
            from streaming.base.util import clean_stale_shared_memory
        except ImportError:
            return module
        clean_stale_shared_memory()
    return module


def set_up_cache(impl: str, params: dict[str, Any]) -> None:
    """Make our set-up caches absent or present before the clock starts (``params['cache']``).

    Ours keeps a binary index summary and epoch 0's sample order (shuffled, default seed) in
    their set-up cache directory (``streaming.dataset.cache_dirs.setup_cache_dir(<local>)``,
    outside ``<local>``; ``index_cache``, ``order_store``). ``'cold'``
    removes them; ``'warm'`` makes sure they are there: a child process builds the dataset,
    takes a sample and waits for the order to be finished and kept (a process that exits
    first does not keep it). Other implementations are left as they are.
    """
    mode = params.get('cache')
    if impl != 'ours' or mode not in ('cold', 'warm'):
        return
    from streaming.dataset.cache_dirs import setup_cache_dir
    shutil.rmtree(setup_cache_dir(params['path']), ignore_errors=True)
    if mode == 'warm':
        # Not a child of ours (the shell exits at once), so that its peak RSS is not counted
        # in ours (RUSAGE_CHILDREN); it reports through a file.
        done = os.path.join(params['path'], f'.prime-{os.getpid()}')
        subprocess.run(['sh', '-c', '"$0" -c "$1" "$2" "$3" >/dev/null 2>&1 &', sys.executable,
                        _PRIME, params['path'], done], check=True)
        deadline = time.monotonic() + 600
        while not os.path.exists(done):
            if time.monotonic() > deadline:
                raise RuntimeError('priming our set-up caches took over 600 s')
            time.sleep(0.05)
        with open(done) as f:
            outcome = f.read()
        os.remove(done)
        if outcome != 'ok':
            raise RuntimeError(f'priming our set-up caches failed: {outcome}')


_PRIME = """
import sys, traceback
try:
    from streaming import StreamingDataset
    from streaming.dataset.order_store import wait_for_background
    next(iter(StreamingDataset(local=sys.argv[1], batch_size=256, shuffle=True)))
    wait_for_background()
    outcome = 'ok'
except BaseException:
    outcome = traceback.format_exc()
with open(sys.argv[2] + '.tmp', 'w') as f:
    f.write(outcome)
import os
os.replace(sys.argv[2] + '.tmp', sys.argv[2])
"""


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident set size of this process (plus its largest reaped child) in MiB.

    The process's own peak is ``VmHWM``: Linux carries ``ru_maxrss`` over from the parent
    through fork and exec, so a worker started by a big runner would report the runner's peak.
    """
    peak = _own_peak_kib()
    if children:
        peak += resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return peak / 1024  # Both are in KiB on Linux.


def _own_peak_kib() -> int:
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def current_rss_mb() -> float:
    """Current resident set size of this process in MiB."""
    with open('/proc/self/statm') as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf('SC_PAGE_SIZE') / 2**20


def _proc_children(pid: int) -> list[int]:
    try:
        with open(f'/proc/{pid}/task/{pid}/children') as f:
            return [int(child) for child in f.read().split()]
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    found, todo = [], _proc_children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += _proc_children(child)
    return found


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live (or not yet reaped) process, all its threads."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')  # utime, stime


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live descendants (a server's)."""
    return _proc_cpu_s(pid) + sum(_proc_cpu_s(child) for child in _descendants(pid))


def job_cpu_s() -> float:
    """User + system CPU seconds of the whole job so far: this process (every thread), its
    reaped children (DataLoader workers once joined, through ``RUSAGE_CHILDREN``), and its
    descendants still alive or not yet reaped (from ``/proc``)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total + sum(_proc_cpu_s(pid) for pid in _descendants(os.getpid()))


def settle_children(timeout: float = 10.0) -> float:
    """Collect garbage (an iterator's ``__del__`` joins its DataLoader workers) and wait up to
    ``timeout`` seconds for this process's children to exit, so that their CPU is final.

    Returns the CPU seconds this process spent in that full collection: the harness's, not the
    loader's: a training loop never calls ``gc.collect()``, and with torch imported one pass over
    the heap is a visible part of a short epoch's CPU (see docs/benchmarks.md, issue 31).
    """
    import gc
    before = resource.getrusage(resource.RUSAGE_SELF)
    gc.collect()
    after = resource.getrusage(resource.RUSAGE_SELF)
    collection = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in _proc_children(os.getpid()) if not _is_zombie(pid)]
        if not alive:
            return collection
        time.sleep(0.05)
    return collection


def _is_zombie(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except OSError:
        return True


def cpu_per_gb(cpu_s: float, payload_bytes: float) -> float:
    """CPU seconds per GB (1e9 bytes) of sample payload delivered to the loop."""
    return cpu_s / (payload_bytes / 1e9) if payload_bytes else float('nan')


def emit(result: dict[str, Any]) -> None:
    """Print the one result line the runner looks for."""
    sys.stdout.flush()
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)


def main(run: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
    """Entry point of a case script: ``script.py IMPL PARAMS_JSON``.

    ``run(impl, params)`` returns the metrics dict; raising ``Unsupported`` reports the case as
    not yet runnable for that implementation.
    """
    impl, params = sys.argv[1], json.loads(sys.argv[2])
    if impl not in IMPLS:
        raise SystemExit(f'unknown implementation {impl!r}; expected one of {IMPLS}')
    try:
        metrics = run(impl, params)
    except Unsupported as why:
        emit({'status': 'unsupported', 'reason': str(why)})
        return
    except Exception as error:  # Report, don't crash: the suite goes on with other cases.
        emit({'status': 'error', 'reason': f'{type(error).__name__}: {error}',
              'traceback': traceback.format_exc()[-4000:]})
        return
    emit({'status': 'ok', 'metrics': metrics})


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
