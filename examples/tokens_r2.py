"""Token shards on a local stand-in for Cloudflare R2, end to end.

    .venv/bin/python examples/tokens_r2.py

1. Starts moto's S3 server on 127.0.0.1 as the "R2" endpoint and sets the source project's
   variables (``R2_DATASET_*``, ``DATASET_BINS_PATH``), plus ``R2_DATASET_ENDPOINT_URL`` to
   point at the local server instead of ``https://ACCOUNT.r2.cloudflarestorage.com``.
2. Pre-tokenizes a few thousand synthetic documents (a Hugging Face ``tokenizers`` word-level
   tokenizer built here, or a plain Python tokenizer if that package is missing) straight to
   the bucket: four shards, their sample-id sidecars and ``manifest.json``.
3. Trains a toy loop over a ``ShardRotation`` (keep 2 shards on disk, prefetch 1, swap every
   6 steps) for two passes over the shards, checking every batch against the shard it came from
   and that the disk never holds more than two shards.
4. "Crashes" in the middle of shard 2 and restarts from the saved step: the resumed batches are
   exactly those the uninterrupted run trained on.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORDS = [f'w{i}' for i in range(500)]
SEQ, BATCH, STEPS_PER_SHARD = 64, 8, 6


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, '-m', 'moto.server', '-H', '127.0.0.1', '-p',
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(('127.0.0.1', port), 0.5).close()
            return proc, f'http://127.0.0.1:{port}'
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError('moto server did not start')


def make_tokenizer():
    """A word-level HF tokenizer if ``tokenizers`` is installed, else a plain callable."""
    vocab = {'<eos>': 0, '[UNK]': 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError:
        return (lambda text: [vocab.get(w, 1) for w in text.split()]), 0
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer, '<eos>'


def documents(n: int):
    rng = np.random.default_rng(0)
    for _ in range(n):
        yield ' '.join(WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(5, 200)))


def train(rotation, start: int, end: int) -> list[list[int]]:
    """Steps ``start .. end-1``; each step's batch as the sidecar ids of its windows."""
    batches = []
    for step in range(start, end):
        rotation.on_step(step)
        sampler = rotation.sampler(seed=1, step=step, batch_size=BATCH)
        chosen = list(sampler)[:BATCH]
        ds = rotation.dataset
        batch = [ds[i] for i in chosen]  # zero-copy uint32 tensors
        for i, window in zip(chosen, batch):
            assert np.array_equal(window.numpy(), ds.tokens[i * SEQ:(i + 1) * SEQ])
        batches.append([ds.sample_id(i) for i in chosen])
    return batches


def main() -> None:
    import boto3

    from streaming.tokens import ShardRotation, list_shards, pretokenize, remote_from_env
    moto, endpoint = start_moto()
    scratch = tempfile.mkdtemp(prefix='tokens-r2-example-')
    try:
        boto3.client('s3', endpoint_url=endpoint, aws_access_key_id='example',
                     aws_secret_access_key='example', region_name='us-east-1',
                     ).create_bucket(Bucket='dataset')
        os.environ.update(R2_DATASET_ACCOUNT_ID='0123456789abcdef',
                          R2_DATASET_BUCKET_NAME='dataset',
                          R2_DATASET_READ_ACCESS_KEY_ID='example',
                          R2_DATASET_READ_SECRET_ACCESS_KEY='example-secret',
                          DATASET_BINS_PATH='remote/tokenized/',
                          R2_DATASET_ENDPOINT_URL=endpoint)
        remote = remote_from_env()  # r2://dataset/remote/tokenized, served by the local "R2"
        tokenizer, eos = make_tokenizer()
        manifest = pretokenize(documents(3000), remote, tokenizer=tokenizer, eos_id=eos,
                               seq_len=SEQ, shard_tokens=SEQ * 1024, dtype='uint16',
                               workers=0, progress=False, max_tokens=4 * SEQ * 1024)
        print(f'wrote {len(manifest.shards)} shards of {manifest.shards[0].num_tokens} tokens '
              f'to {remote}')

        shards, _ = list_shards(remote)
        local = os.path.join(scratch, 'node-cache')
        total = 2 * len(shards) * STEPS_PER_SHARD
        with ShardRotation(shards, local, seq_len=SEQ, keep=2, prefetch=1,
                           steps_per_shard=STEPS_PER_SHARD) as rotation:
            full = train(rotation, 0, total)
            waits = rotation.waits
            rotation.close(wait=True)  # let the prefetch in flight finish before moto stops
        on_disk = sorted(n for n in os.listdir(local) if n.endswith('.npy'))
        assert len(on_disk) <= 2, on_disk
        print(f'trained {total} steps over {len(shards)} shards twice; swap waits '
              f'{[round(w, 3) for _, w in waits]} s; on disk now: {on_disk}')

        crash = 2 * STEPS_PER_SHARD + 3  # the middle of shard 2
        with ShardRotation(shards, local, seq_len=SEQ, keep=2, prefetch=1,
                           steps_per_shard=STEPS_PER_SHARD, start_step=crash) as rotation:
            resumed = train(rotation, crash, total)
            rotation.close(wait=True)
        assert resumed == full[crash:], 'the restart did not resume where the run stopped'
        print(f'restarted at step {crash} (shard {crash // STEPS_PER_SHARD}, step '
              f'{crash % STEPS_PER_SHARD} of it): the same {len(resumed)} batches as the '
              f'uninterrupted run')
        print('OK')
    finally:
        from streaming.storage import register_backend
        register_backend('r2', None)
        moto.terminate()
        moto.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    main()
