"""examples/lightning_datamodule.py: a LightningDataModule preempted mid-epoch and resumed."""

from __future__ import annotations

from tests.examples.conftest import run_example


def test_lightning_datamodule_resume(tmp_path) -> None:
    proc = run_example('lightning_datamodule.py', '--workdir', str(tmp_path))
    assert 'every one of 320 samples seen once' in proc.stdout, proc.stdout
    assert 'Restored all states from the checkpoint' in proc.stdout + proc.stderr
    assert (tmp_path / 'preempted.ckpt').is_file()
