"""Training-like loops that checkpoint and resume, with either library; one rank per process.

Usage: ``<python> resume_driver.py ours|reference SPEC.json OUT_PREFIX``, with RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set when there are several ranks
(then a gloo process group is initialized first, as a training script would). ``ours`` needs
PYTHONPATH to point at this tree; ``reference`` runs in the reference's env without it.

SPEC is ``{"phase": "first"|"resume", "cases": [...]}``; each case has ``name``, ``streams``
(``remote`` and optional ``proportion``), ``kwargs`` for ``StreamingDataset``, ``batch_size``
and ``workers`` of this phase's topology, ``epochs_before``, ``k`` and ``epochs_after``.

* ``first``: run ``epochs_before`` whole epochs, then ``k`` batches of the next one (``k`` null:
  none, the checkpoint is taken before any iteration), take ``StreamingDataLoader.state_dict()``,
  then go on to the end of that epoch and ``epochs_after`` more. Writes
  ``{"pre": batches, "state": dict, "cont": [batches per epoch]}``.
* ``resume``: for each ``(source, state)`` of ``case["states"]``, a fresh dataset (a new local
  cache) loads the state and runs the rest of the epoch and ``epochs_after`` more, taking the
  state again after ``AGAIN_AFTER`` batches (or at the end of a shorter epoch). Writes
  ``{source: {"post": [batches per epoch], "again": dict}}``.

A batch is the list of the ``id`` column of its samples. The result of this rank goes to
``OUT_PREFIX.<rank>.json`` as ``{case name: result}``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LIBRARY = sys.argv[1]
if LIBRARY == 'reference':
    import ref_driver  # noqa: F401  (installs the torchvision stand-in, checks the version)

import torch.distributed as dist  # noqa: E402

from streaming import Stream, StreamingDataLoader, StreamingDataset  # noqa: E402

if LIBRARY == 'ours':
    assert not hasattr(StreamingDataset, '_resume_incr_epoch'), 'the reference was imported'


AGAIN_AFTER = 2  # batches of the resumed run after which it checkpoints again


def _loader(case: dict, local: str) -> StreamingDataLoader:
    streams = [Stream(remote=spec['remote'], local=os.path.join(local, str(j)),
                      proportion=spec.get('proportion'))
               for j, spec in enumerate(case['streams'])]
    dataset = StreamingDataset(streams=streams, batch_size=case['batch_size'], **case['kwargs'])
    return StreamingDataLoader(dataset, batch_size=case['batch_size'],
                               num_workers=case['workers'])


def _ids(batch: dict) -> list[int]:
    return [int(x) for x in batch['id']]


def _epochs(loader: StreamingDataLoader, count: int) -> list[list[list[int]]]:
    return [[_ids(batch) for batch in loader] for _ in range(count)]


def first(case: dict, local: str) -> dict:
    loader = _loader(case, local)
    _epochs(loader, case['epochs_before'])
    pre: list[list[int]] = []
    if case['k'] is None:
        state = loader.state_dict()
        rest = _epochs(loader, 1)[0]
    else:
        batches = iter(loader)
        pre = [_ids(next(batches)) for _ in range(case['k'])]
        state = loader.state_dict()
        rest = [_ids(batch) for batch in batches]
    return {'pre': pre, 'state': state, 'cont': [rest] + _epochs(loader, case['epochs_after'])}


def resume(case: dict, local: str) -> dict:
    out = {}
    for source, state in case['states'].items():
        loader = _loader(case, os.path.join(local, source))
        loader.load_state_dict(json.loads(json.dumps(state)))
        rest, again = [], None
        for batch in loader:
            rest.append(_ids(batch))
            if len(rest) == AGAIN_AFTER:
                again = loader.state_dict()
        if again is None:  # the resumed epoch was shorter
            again = loader.state_dict()
        out[source] = {'post': [rest] + _epochs(loader, case['epochs_after']), 'again': again}
        del loader
        gc.collect()
    return out


def main() -> None:
    # The collections below (the reference's datasets hold descriptors until collected) need not
    # walk the objects of the imports: ten times cheaper.
    gc.freeze()
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    world_size = int(os.environ.get('WORLD_SIZE', '1'))
    if world_size > 1:
        dist.init_process_group('gloo')
    run = {'first': first, 'resume': resume}[spec['phase']]
    results = {}
    for case in spec['cases']:
        # Ranks of a node share the local cache, as on a real node.
        started = time.perf_counter()
        results[case['name']] = run(case, os.path.join(spec['local'], case['name']))
        print(f"{case['name']}: {time.perf_counter() - started:.2f} s", file=sys.stderr)
        gc.collect()
    with open(f"{sys.argv[3]}.{os.environ.get('RANK', '0')}.json", 'w') as f:
        json.dump(results, f)
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == '__main__':
    main()
