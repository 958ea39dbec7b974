"""One training process over a ShardRotation, as a test job runs it (``python -m ...``).

Reads a JSON config (argv[1]); with ``WORLD_SIZE`` > 1 joins a gloo process group and checks at
every step, through a collective, that all ranks use the same shard. Writes what it trained on
to ``{out}/rank{RANK}.json``: for each step, the shard number and the window indices of its
batch. ``hold_after_start``: after the first shard, sleep (the prefetch keeps running) so the
test can kill the process mid-download.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time


def main() -> None:
    with open(sys.argv[1]) as f:
        config = json.load(f)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    rank, world = int(os.environ.get('RANK', 0)), int(os.environ.get('WORLD_SIZE', 1))
    dist = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group('gloo', rank=rank, world_size=world)
    from streaming.tokens import ShardRotation, list_shards
    shards, _ = list_shards(config['remote'])
    rotation = ShardRotation(shards, config['local'], seq_len=config['seq_len'],
                             keep=config.get('keep'), disk_budget=config.get('disk_budget'),
                             prefetch=config.get('prefetch', 1),
                             steps_per_shard=config['steps_per_shard'],
                             start_step=config.get('start_step', 0),
                             timeout=config.get('timeout', 10.0),
                             stall_timeout=config.get('stall_timeout', 60.0))
    step = config.get('start_step', 0)
    rotation.on_step(step)
    if config.get('hold_after_start'):
        print('HOLDING', flush=True)
        time.sleep(3600)
    batch = config['batch']
    steps = []
    while step < config['end_step']:
        rotation.on_step(step)
        sampler = rotation.sampler(seed=config.get('seed', 0), step=step, batch_size=batch)
        indices = list(sampler)
        if not indices:  # The shard has fewer windows than its steps need: an empty step.
            steps.append({'step': step, 'shard': -1, 'started': rotation.started,
                          'indices': [], 'first_tokens': []})
            step += 1
            continue
        for i in range(0, len(indices), batch):
            if step >= config['end_step'] or rotation.shard_for_step(step) != rotation.started:
                break
            chunk = indices[i:i + batch]
            windows = [int(rotation.dataset[j][0]) for j in chunk]
            shard = rotation.shards[rotation.position].index
            if dist is not None:
                import torch
                agreed = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
                dist.all_gather(agreed, torch.tensor([rotation.started]))
                assert {int(t) for t in agreed} == {rotation.started}, agreed
            steps.append({'step': step, 'shard': shard, 'started': rotation.started,
                          'indices': chunk, 'first_tokens': windows})
            step += 1
            if rotation.shard_for_step(step) != rotation.started:
                break
    result = {'steps': steps, 'waits': rotation.waits, 'downloader': rotation.downloader}
    with open(os.path.join(config['out'], f'rank{rank}.json'), 'w') as f:
        json.dump(result, f)
    rotation.close()
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == '__main__':
    main()
