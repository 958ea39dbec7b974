"""One rank of a test job: ``python -m tests.dataset.rank_main CONFIG.json``.

The launcher (``launch.py``) starts one process per rank with the launcher variables set, as
torchrun would. Each rank joins a gloo process group (unless told not to), builds the dataset and
a StreamingDataLoader with real workers, and writes the batches it saw, as sample-id lists, to
``<out>/rank<rank>.json``. Optionally it stops mid-epoch and saves ``state_dict()``, or starts by
loading one.

With ``runs`` (a list of such run configs: ``dataset``, ``num_workers``, ``epochs``, ...), the
rank does each run in turn in the same process and world, as a script that builds several
datasets would, and writes ``{"runs": [result, ...]}``: one interpreter (torch imported once)
serves several checks of one world.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
from typing import Any


def run(config: dict[str, Any], job: dict[str, Any], rank: int, node: int) -> dict[str, Any]:
    """One dataset and loader: the batches of ``epochs`` epochs (and the state when stopped)."""
    from streaming import StreamingDataLoader, StreamingDataset
    for module in config.get('install', []):  # Registers custom orders (e.g. custom_order).
        importlib.import_module(module).install()
    kwargs = dict(config['dataset'])
    if 'local' in kwargs:  # Simulated nodes on one machine each keep their own cache.
        kwargs['local'] = os.path.join(kwargs['local'], f'node{node}')
    dataset = StreamingDataset(**kwargs)
    loader = StreamingDataLoader(dataset, batch_size=kwargs['batch_size'],
                                 num_workers=config.get('num_workers', 0),
                                 persistent_workers=config.get('persistent_workers', False)
                                 and config.get('num_workers', 0) > 0)
    if config.get('load_state'):
        with open(config['load_state']) as f:
            loader.load_state_dict(json.load(f))
    epochs = []
    stop_after = config.get('stop_after_batches')
    for _ in range(config.get('epochs', 1)):
        batches = []
        for batch in loader:
            batches.append([int(i) for i in batch['id']])
            if job.get('sleep_per_batch'):  # For tests that kill a job mid-epoch.
                with open(os.path.join(job['out'], f'progress{rank}'), 'w') as f:
                    f.write(str(len(batches)))
                time.sleep(job['sleep_per_batch'])
            if stop_after is not None and len(batches) == stop_after:
                break
        epochs.append(batches)
    result = {'epochs': epochs, 'len': len(dataset), 'egress': loader.stats.egress}
    if stop_after is not None:
        result['state'] = loader.state_dict()
    return result


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    rank = int(os.environ['RANK'])
    if job.get('init_process_group', True):
        import torch.distributed as dist
        dist.init_process_group('gloo', init_method=f'file://{job["rendezvous"]}',
                                rank=rank, world_size=int(os.environ['WORLD_SIZE']))
    node = rank // int(os.environ['LOCAL_WORLD_SIZE'])
    if 'runs' in job:
        results = []
        for config in job['runs']:
            results.append(run(config, job, rank, node))
            gc.collect()  # The finished run's loader (and its workers) go before the next.
        output: dict[str, Any] = {'runs': results}
    else:
        output = run(job, job, rank, node)
    with open(os.path.join(job['out'], f'rank{rank}.json'), 'w') as f:
        json.dump(output, f)
    if job.get('init_process_group', True):
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


if __name__ == '__main__':
    main()
