"""R2 configuration from the source project's variables, waiting ranks' deadline, MDS token
columns, and a light ``import streaming``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from streaming.storage import register_backend
from streaming.tokens import (
    MDSTokenWindows,
    R2Config,
    ShardRotation,
    ShardWaitTimeout,
    list_shards,
    remote_from_env,
)
from streaming.tokens.remote import ConfigError
from tests.storage.conftest import new_name, s3_client
from tests.tokens.conftest import SEQ, tokens_for, write_dataset

SECRET = 'r2-secret-Zk81pQ'


@pytest.fixture
def r2_env(moto, monkeypatch, tmp_path):
    """The source project's variables, pointing at moto as the R2 endpoint."""
    bucket = new_name('dataset')
    s3_client(moto.url).create_bucket(Bucket=bucket)
    staged = str(tmp_path / 'staged')
    write_dataset(staged, 3, 16)
    client = s3_client(moto.url)
    for name in os.listdir(staged):
        client.upload_file(os.path.join(staged, name), bucket, f'remote/tokenized/{name}')
    env = {'R2_DATASET_ACCOUNT_ID': 'acct0123', 'R2_DATASET_BUCKET_NAME': bucket,
           'R2_DATASET_READ_ACCESS_KEY_ID': 'read-key', 'DATASET_BINS_PATH': 'remote/tokenized/',
           'R2_DATASET_READ_SECRET_ACCESS_KEY': SECRET, 'R2_DATASET_ENDPOINT_URL': moto.url}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield bucket
    register_backend('r2', None)


def test_r2_from_the_source_projects_variables(r2_env, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    config = R2Config.from_env()
    assert config.endpoint_url == os.environ['R2_DATASET_ENDPOINT_URL']
    assert R2Config.from_env({**os.environ, 'R2_DATASET_ENDPOINT_URL': ''}).endpoint_url == \
        'https://acct0123.r2.cloudflarestorage.com'
    assert SECRET not in repr(config) and SECRET not in str(config)
    remote = remote_from_env()
    assert remote == f'r2://{r2_env}/remote/tokenized'
    assert 'AWS_SECRET_ACCESS_KEY' not in os.environ  # nothing written to the environment
    shards, manifest = list_shards(remote)
    assert manifest is not None and len(shards) == 3
    with ShardRotation(shards, str(tmp_path / 'l'), seq_len=SEQ, keep=2) as rotation:
        for k in range(4):
            assert np.array_equal(rotation.dataset.tokens, tokens_for(k % 3, 16 * SEQ))
            rotation.advance()
    missing = list_shards(remote, manifest=False, num_shards=5)[0][4]
    with pytest.raises(FileNotFoundError, match='train_000004') as caught, \
            ShardRotation([missing], str(tmp_path / 'm'), seq_len=SEQ) as rotation:
        rotation.dataset  # noqa: B018
    assert SECRET not in str(caught.value)
    assert SECRET not in caplog.text


def test_incomplete_r2_settings_name_the_variables(monkeypatch) -> None:
    with pytest.raises(ConfigError, match='R2_DATASET_BUCKET_NAME.*R2_DATASET_READ_SECRET'):
        R2Config.from_env({'R2_DATASET_ACCOUNT_ID': 'a', 'R2_DATASET_READ_ACCESS_KEY_ID': 'k'})
    with pytest.raises(ConfigError, match='DATASET_BINS_PATH'):
        remote_from_env({})
    assert remote_from_env({'DATASET_BINS_PATH': 's3://b/tokenized'}) == 's3://b/tokenized'


def test_a_waiting_rank_fails_when_nothing_progresses(tmp_path) -> None:
    remote = str(tmp_path / 'remote')
    write_dataset(remote, 2, 8)
    shards, _ = list_shards(remote)
    rotation = ShardRotation(shards, str(tmp_path / 'l'), seq_len=SEQ, downloader=False,
                             stall_timeout=0.5)
    with pytest.raises(ShardWaitTimeout, match=r'shard 0 .*train_000000.npy.*0.5s'):
        rotation.dataset  # noqa: B018


def test_windows_over_an_mds_token_column(tmp_path) -> None:
    from streaming import LocalDataset, MDSWriter
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50_000, rng.integers(1, 40), dtype=np.uint32) for _ in range(200)]
    out = str(tmp_path / 'mds')
    with MDSWriter(out=out, columns={'tokens': 'ndarray:uint32'}, size_limit='8kb') as writer:
        for doc in docs:
            writer.write({'tokens': doc})
    stream = np.concatenate(docs)
    windows = MDSTokenWindows(LocalDataset(out), 'tokens', seq_len=SEQ)
    assert len(windows) == len(stream) // SEQ
    for i in range(len(windows)):
        assert np.array_equal(windows[i].numpy(), stream[i * SEQ:(i + 1) * SEQ])
    labelled = MDSTokenWindows(out, 'tokens', seq_len=SEQ, labels=True, as_tensor=False)
    assert np.array_equal(labelled[3], stream[3 * SEQ:4 * SEQ + 1])
    with pytest.raises(KeyError, match='nope'):
        MDSTokenWindows(out, 'nope', seq_len=SEQ)


def test_import_streaming_does_not_import_tokens() -> None:
    code = ('import sys, streaming; '
            'print(sorted(m for m in sys.modules if m.startswith("streaming.tokens") '
            'or m in ("tokenizers", "pyarrow")))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env={**os.environ, 'PYTHONPATH': os.getcwd()}, check=True)
    assert out.stdout.strip() == '[]'
    code = ('import sys, streaming.tokens as t; t.ShardRotation; t.TokenShardWriter; '
            'print(sorted(m for m in ("tokenizers", "pyarrow", "boto3") if m in sys.modules))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env={**os.environ, 'PYTHONPATH': os.getcwd()}, check=True)
    assert out.stdout.strip() == '[]'
