"""One emulated node of ``benchmarks.fleet``: its ranks, each reading its part of the epoch.

``--node`` mode (run inside the node's mount namespace, with its own ``/dev/shm``) starts the
node's ``--ranks`` rank processes and waits for them. Each rank joins the fleet's gloo process
group, builds a ``StreamingDataset`` on the node's cache directory, and iterates a
``StreamingDataLoader`` once every rank of the fleet has built its loader (a barrier), every
step ended by a barrier (as a training step's all-reduce would).
It appends each step's sample ids to its log (flushed per step), rank 0 saves the loader's
``state_dict`` every ``--checkpoint-every`` steps, and at the end it writes its timings.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time


def _rank_main(args: argparse.Namespace) -> None:
    started = time.monotonic()
    import torch.distributed as dist

    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.storage.pacing import PACER
    dist.init_process_group('gloo', rank=args.rank, world_size=args.world)
    built = time.monotonic()
    dataset = StreamingDataset(remote=args.remote, local=args.local, batch_size=args.batch_size,
                               shuffle=True, shuffle_seed=17, download_timeout=60)
    loader = StreamingDataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    if args.resume:
        with open(args.resume, 'rb') as f:
            loader.load_state_dict(pickle.load(f))
    # A real fleet's nodes start within one rendezvous: every rank begins reading together, not
    # as soon as its own (loaded) machine got this far.
    dist.barrier()
    first = None
    samples = 0
    step = args.first_step
    with open(args.log, 'a') as log:
        for batch in loader:
            if first is None:
                first = time.monotonic()
            ids = batch['id'].tolist()
            samples += len(ids)
            step += 1
            log.write(json.dumps([step, ids]) + '\n')
            log.flush()
            dist.barrier()  # The training step's all-reduce: every rank has taken this batch.
            if args.rank == 0 and args.checkpoint_every and step % args.checkpoint_every == 0:
                state = loader.state_dict()
                temp = f'{args.checkpoint}.tmp'
                with open(temp, 'wb') as f:
                    pickle.dump({'step': step, 'state': state}, f)
                os.replace(temp, args.checkpoint)
    ended = time.monotonic()
    dist.barrier()
    with open(args.out, 'w') as f:
        json.dump({'rank': args.rank, 'samples': samples, 'start_to_build_s': built - started,
                   'time_to_first_batch_s': (first or ended) - built,
                   'read_s': ended - (first or ended), 'total_s': ended - built,
                   # The node's pace at the end (None: never refused) and refusals it saw.
                   'pacer_rate': PACER.rate, 'pacer_throttles': PACER.throttles}, f)
    dist.destroy_process_group()


def _node_main(args: argparse.Namespace, passthrough: list[str]) -> None:
    ranks = []
    for local in range(args.ranks):
        rank = args.node * args.ranks + local
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(local),
                   LOCAL_WORLD_SIZE=str(args.ranks), WORLD_SIZE=str(args.world))
        ranks.append(subprocess.Popen(
            [sys.executable, '-m', 'benchmarks.fleet_node', '--rank', str(rank),
             '--log', os.path.join(args.outdir, f'rank{rank}.log'),
             '--out', os.path.join(args.outdir, f'rank{rank}.json'), *passthrough], env=env))
    codes = [rank.wait() for rank in ranks]
    sys.exit(max(codes, key=abs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--node', type=int, help='run the node: start its ranks')
    parser.add_argument('--ranks', type=int, default=1)
    parser.add_argument('--outdir')
    parser.add_argument('--rank', type=int)
    parser.add_argument('--world', type=int, required=True)
    parser.add_argument('--remote', required=True)
    parser.add_argument('--local', required=True)
    parser.add_argument('--batch-size', type=int, required=True)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--log')
    parser.add_argument('--out')
    parser.add_argument('--checkpoint')
    parser.add_argument('--checkpoint-every', type=int, default=0)
    parser.add_argument('--resume', help='a checkpoint to load_state_dict from')
    parser.add_argument('--first-step', type=int, default=0)
    args, _ = parser.parse_known_args(argv)
    if args.node is not None:
        argv = list(sys.argv[1:] if argv is None else argv)
        passthrough = [a for i, a in enumerate(argv) if a not in ('--node', '--ranks', '--outdir')
                       and (i == 0 or argv[i - 1] not in ('--node', '--ranks', '--outdir'))]
        _node_main(args, passthrough)
    else:
        _rank_main(args)


if __name__ == '__main__':
    main()
