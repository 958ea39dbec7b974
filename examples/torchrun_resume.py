"""Distributed training with ``torchrun`` and DDP (gloo, CPU), stopped mid-epoch and resumed.

    python examples/torchrun_resume.py [--workdir DIR] [--nproc 2]

Run plainly, this script is the driver:

1. writes a small MDS dataset (features ``x``, target ``y``, sample ``id``);
2. launches ``torchrun --standalone --nproc_per_node=2`` on itself: each rank streams its share
   of the shuffled epoch through a ``DataLoader``, trains a DDP model, and after 7 steps rank 0
   saves a checkpoint holding the model, the optimizer and ``dataset.state_dict(...)``; then
   the job stops, as a preempted job would;
3. launches ``torchrun`` again with ``--resume``: every rank loads the checkpoint, calls
   ``dataset.load_state_dict(...)`` and finishes the epoch;
4. checks that the two runs together saw every sample exactly once, across both ranks.

Under ``torchrun`` (``RANK`` set) it is the training script of one rank. ``StreamingDataset``
reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` itself; its
``batch_size`` is the per-rank batch size, and ``state_dict(num_samples, ...)`` takes the
number of samples consumed by all ranks together.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

NUM_SAMPLES = 640
BATCH = 16  # per rank
STOP_AFTER = 7  # steps in the first run


def write_dataset(out: str) -> None:
    from streaming import MDSWriter
    rng = np.random.default_rng(0)
    weights = np.arange(1, 9, dtype=np.float32)
    with MDSWriter(out=out, columns={'x': 'ndarray:float32:8', 'y': 'float32', 'id': 'int'},
                   size_limit='16kb') as writer:
        for i in range(NUM_SAMPLES):
            x = rng.normal(size=8).astype(np.float32)
            writer.write({'x': x, 'y': np.float32(x @ weights), 'id': i})


def train(args: argparse.Namespace) -> None:
    """One rank's training loop (run by torchrun)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    from streaming import StreamingDataset

    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    dataset = StreamingDataset(remote=args.data, local=args.cache, batch_size=BATCH,
                               shuffle=True, shuffle_seed=7)
    ckpt_path = os.path.join(args.workdir, 'checkpoint.pt')
    start = 0
    if args.resume:
        ckpt = torch.load(ckpt_path, weights_only=True)
        model.module.load_state_dict(ckpt['model'])
        optimizer.load_state_dict(ckpt['optimizer'])
        dataset.load_state_dict(ckpt['dataset'])
        start = ckpt['step']
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=1)
    run = 'resumed' if args.resume else 'first'
    seen: list[int] = []
    step = start
    for batch in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(batch['x']).squeeze(1), batch['y'])
        loss.backward()
        optimizer.step()
        seen += batch['id'].tolist()
        step += 1
        if not args.resume and step == STOP_AFTER:
            # Samples consumed since this run started, by all ranks together.
            state = dataset.state_dict(num_samples=(step - start) * BATCH * world,
                                       from_beginning=False)
            if rank == 0:
                torch.save({'step': step, 'model': model.module.state_dict(),
                            'optimizer': optimizer.state_dict(), 'dataset': state}, ckpt_path)
            break  # "preempted"
    np.save(os.path.join(args.workdir, f'ids-{run}-rank{rank}.npy'), np.array(seen))
    print(f'rank {rank}/{world} ({run} run): {len(seen)} samples in steps {start}..{step}, '
          f'last loss {loss.item():.4f}', flush=True)
    dist.barrier()
    dist.destroy_process_group()


def launch(args: argparse.Namespace, *extra: str) -> None:
    command = [sys.executable, '-m', 'torch.distributed.run', '--standalone',
               f'--nproc_per_node={args.nproc}', os.path.abspath(__file__),
               '--workdir', args.workdir, '--data', args.data, '--cache', args.cache, *extra]
    subprocess.run(command, check=True, timeout=600)


def drive(args: argparse.Namespace) -> None:
    write_dataset(args.data)
    launch(args)
    launch(args, '--resume')
    first = [np.load(f) for f in sorted(glob.glob(os.path.join(args.workdir, 'ids-first-*')))]
    rest = [np.load(f) for f in sorted(glob.glob(os.path.join(args.workdir, 'ids-resumed-*')))]
    assert len(first) == len(rest) == args.nproc, 'a rank did not report'
    assert all(len(ids) == STOP_AFTER * BATCH for ids in first), [len(i) for i in first]
    everything = np.sort(np.concatenate(first + rest))
    assert np.array_equal(everything, np.arange(NUM_SAMPLES)), \
        'the interrupted and the resumed runs did not cover the epoch exactly once'
    print(f'OK: {args.nproc} ranks, stopped after {STOP_AFTER} steps and resumed; '
          f'{NUM_SAMPLES} samples, each seen exactly once')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', help='where the data, cache and checkpoint go '
                        '(default: a temporary directory)')
    parser.add_argument('--nproc', type=int, default=2, help='processes (ranks) to launch')
    parser.add_argument('--data', help=argparse.SUPPRESS)
    parser.add_argument('--cache', help=argparse.SUPPRESS)
    parser.add_argument('--resume', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if 'RANK' in os.environ:
        return train(args)
    with tempfile.TemporaryDirectory(prefix='streaming-torchrun-') as tmp:
        args.workdir = args.workdir or tmp
        args.data = os.path.join(args.workdir, 'data')
        args.cache = os.path.join(args.workdir, 'cache')
        drive(args)


if __name__ == '__main__':
    main()
