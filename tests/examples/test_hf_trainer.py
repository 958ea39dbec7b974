"""examples/hf_trainer.py: transformers.Trainer over a tokenizing StreamingDataset + collator."""

from __future__ import annotations

from tests.examples.conftest import run_example


def test_hf_trainer(tmp_path) -> None:
    # 12 steps (of 32 in the epoch): enough for the loss to fall, the trainer to finish and the
    # workers to tokenize and the collator to pad real batches.
    proc = run_example('hf_trainer.py', '--workdir', str(tmp_path), '--steps', '12')
    assert 'OK: 12 steps of 16 streamed, tokenized, padded samples' in proc.stdout, proc.stdout
