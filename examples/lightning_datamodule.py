"""PyTorch Lightning: a ``LightningDataModule`` over ``StreamingDataset``, checkpointed mid-epoch.

    python examples/lightning_datamodule.py [--workdir DIR]

1. Writes a small MDS dataset (features ``x``, target ``y``, sample ``id``).
2. Trains a linear model with ``lightning.Trainer`` on CPU; after 5 steps a callback saves a
   checkpoint and stops the run, as a preempted job would.
3. A new ``Trainer`` resumes with ``fit(..., ckpt_path=...)``: Lightning restores the model, the
   optimizer, its loop counters and the data module's ``state_dict()``, and the epoch goes on
   where it stopped. The two runs together see every sample exactly once.

The data module saves ``dataset.state_dict(num_samples, from_beginning=True)`` with the number
of batches the *trainer* has processed in this epoch. It hands Lightning a plain ``DataLoader``
rather than a ``StreamingDataLoader``: Lightning fetches one batch ahead of the training step,
so a loader's own count runs a batch ahead of the model at checkpoint time, and Lightning saves
and restores any loader that has ``state_dict`` itself.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from streaming import MDSWriter, StreamingDataset

NUM_SAMPLES = 320
BATCH = 16
STOP_AFTER = 5


def write_dataset(out: str) -> None:
    rng = np.random.default_rng(0)
    weights = np.arange(1, 9, dtype=np.float32)
    with MDSWriter(out=out, columns={'x': 'ndarray:float32:8', 'y': 'float32', 'id': 'int'},
                   size_limit='16kb') as writer:
        for i in range(NUM_SAMPLES):
            x = rng.normal(size=8).astype(np.float32)
            writer.write({'x': x, 'y': np.float32(x @ weights), 'id': i})


class StreamingDataModule(L.LightningDataModule):
    """Streams ``remote`` through a local cache; resumable mid-epoch through ``state_dict``."""

    def __init__(self, remote: str, local: str, batch_size: int, num_workers: int = 2) -> None:
        super().__init__()
        self.remote, self.local = remote, local
        self.batch_size, self.num_workers = batch_size, num_workers
        self.dataset: StreamingDataset | None = None
        self._pending: dict[str, Any] | None = None

    def train_dataloader(self) -> DataLoader:
        self.dataset = StreamingDataset(remote=self.remote, local=self.local,
                                        batch_size=self.batch_size, shuffle=True, shuffle_seed=3)
        if self._pending is not None:  # Restored from a checkpoint before the loader existed.
            self.dataset.load_state_dict(self._pending)
            self._pending = None
        return DataLoader(self.dataset, batch_size=self.batch_size,
                          num_workers=self.num_workers, persistent_workers=False)

    def state_dict(self) -> dict[str, Any]:
        if self.dataset is None:
            return {}
        # Batches the training step has taken in this epoch (counted from the epoch's start,
        # also across resumptions), times the per-rank batch size, times the ranks.
        batches = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        samples = batches * self.batch_size * self.trainer.world_size
        return {'dataset': self.dataset.state_dict(num_samples=samples, from_beginning=True)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if 'dataset' in state:
            self._pending = state['dataset']


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)
        self.seen: list[int] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen += batch['id'].tolist()
        return torch.nn.functional.mse_loss(self.linear(batch['x']).squeeze(1), batch['y'])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Preempt(L.Callback):
    """Saves a checkpoint after ``steps`` training steps and stops the run."""

    def __init__(self, path: str, steps: int) -> None:
        self.path, self.steps = path, steps

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.steps:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def make_trainer(*callbacks: L.Callback) -> L.Trainer:
    return L.Trainer(accelerator='cpu', devices=1, max_epochs=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=list(callbacks))


def run(workdir: str) -> tuple[list[int], list[int]]:
    remote, cache = os.path.join(workdir, 'data'), os.path.join(workdir, 'cache')
    ckpt = os.path.join(workdir, 'preempted.ckpt')
    write_dataset(remote)

    model = Regression()
    make_trainer(Preempt(ckpt, STOP_AFTER)).fit(model, datamodule=StreamingDataModule(
        remote, cache, BATCH))
    first = model.seen

    resumed = Regression()
    trainer = make_trainer()
    trainer.fit(resumed, datamodule=StreamingDataModule(remote, cache, BATCH), ckpt_path=ckpt)
    rest = resumed.seen
    assert len(first) == STOP_AFTER * BATCH, len(first)
    assert sorted(first + rest) == list(range(NUM_SAMPLES)), \
        'the preempted and the resumed runs did not cover the epoch exactly once'
    assert trainer.global_step == NUM_SAMPLES // BATCH, trainer.global_step
    print(f'OK: stopped after {STOP_AFTER} steps ({len(first)} samples), resumed from the '
          f'checkpoint for {len(rest)} more; every one of {NUM_SAMPLES} samples seen once')
    return first, rest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', help='where data, cache and checkpoint go (default: temp)')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix='streaming-lightning-') as tmp:
        run(args.workdir or tmp)


if __name__ == '__main__':
    main()
