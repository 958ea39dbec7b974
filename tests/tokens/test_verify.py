"""Verification of token windows against the sidecar: a flipped byte is never served."""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np
import pytest

from streaming.tokens import ShardCorruptError, ShardRotation, TokenWindowDataset, list_shards
from streaming.tokens import verify as verify_module
from streaming.tokens.format import window_ids
from streaming.world import World
from tests.tokens.conftest import SEQ, gets, tokens_for, write_dataset

HEADER = 128


def numpy_dataset(out: str, shards: int, windows: int) -> None:
    """The source project's layout written with numpy alone: np.save + a raw uint64 sidecar."""
    os.makedirs(out, exist_ok=True)
    for i in range(shards):
        tokens = tokens_for(i, windows * SEQ)
        np.save(os.path.join(out, f'train_{i:06d}.npy'), tokens)
        window_ids(tokens, SEQ).tofile(os.path.join(out, f'sample_ids_{i:06d}.bin'))


def flip(path: str, window: int, offset_in_window: int = 3) -> None:
    with open(path, 'r+b') as f:
        f.seek(HEADER + window * SEQ * 4 + offset_in_window)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))


def digest_hex(data: np.ndarray) -> str:
    return '0x' + hashlib.blake2b(data.tobytes(), digest_size=8).digest()[::-1].hex()


def test_flipped_byte_in_a_prefetched_shard_fails_the_swap(tmp_path, caplog) -> None:
    """The issue's repro: no manifest, one byte of shard 1 flipped after the header."""
    remote = str(tmp_path / 'remote')
    numpy_dataset(remote, shards=2, windows=8)
    flip(os.path.join(remote, 'train_000001.npy'), window=1)
    shards, manifest = list_shards(remote)
    assert manifest is None
    good = tokens_for(1, 8 * SEQ)[SEQ:2 * SEQ]
    bad = good.copy()
    bad.view(np.uint8)[3] ^= 0x01
    with caplog.at_level(logging.WARNING, 'streaming.tokens'), \
            ShardRotation(shards, str(tmp_path / 'local'), seq_len=SEQ, keep=2) as rotation:
        assert rotation.dataset.batch([0, 1]).shape == (2, SEQ)  # shard 0 is fine
        with pytest.raises(ShardCorruptError) as caught:
            rotation.advance()
    error = caught.value
    assert (error.shard, error.window) == (1, 1)
    assert error.expected == digest_hex(good) and error.actual == digest_hex(bad)
    message = str(error)
    for part in ('shard 1', 'train_000001.npy', 'window 1', error.expected, error.actual,
                 're-download'):
        assert part in message, (part, message)
    assert any('downloading it again' in r.getMessage() for r in caplog.records)


def test_an_active_unverified_shard_is_checked_window_by_window(tmp_path) -> None:
    """Shard 0 comes in the foreground, unverified: each window is checked before use."""
    remote = str(tmp_path / 'remote')
    numpy_dataset(remote, shards=2, windows=8)
    flip(os.path.join(remote, 'train_000000.npy'), window=5)
    shards, _ = list_shards(remote)
    with ShardRotation(shards, str(tmp_path / 'local'), seq_len=SEQ, keep=2,
                       prefetch=0, stall_timeout=30) as rotation:
        ds = rotation.dataset
        assert np.array_equal(ds.batch([0, 1, 2]).numpy(), tokens_for(0, 3 * SEQ).reshape(3, -1))
        assert np.array_equal(ds[4].numpy(), tokens_for(0, 5 * SEQ)[4 * SEQ:])
        with pytest.raises(ShardCorruptError, match=r'shard 0 .*window 5.*re-download'):
            ds.batch([3, 5])
        with pytest.raises(ShardCorruptError, match='window 5'):
            ds[5]  # noqa: B018
    # Without verification the same byte is served silently (what the test guards against).
    plain = TokenWindowDataset(os.path.join(remote, 'train_000000.npy'),
                               os.path.join(remote, 'sample_ids_000000.bin'), seq_len=SEQ)
    assert plain.batch([5]).shape == (1, SEQ)
    checked = TokenWindowDataset(os.path.join(remote, 'train_000000.npy'),
                                 os.path.join(remote, 'sample_ids_000000.bin'), seq_len=SEQ,
                                 verify=True, as_tensor=False)
    with pytest.raises(ShardCorruptError, match='window 5'):
        list(checked)


def test_marker_spares_the_rehash_and_a_changed_file_is_hashed_again(tmp_path, monkeypatch):
    remote = str(tmp_path / 'remote')
    write_dataset(remote, shards=3, windows=16)
    shards, manifest = list_shards(remote)
    calls: list[str] = []
    real = verify_module.find_mismatch

    def counting(path, *args, **kwargs):
        calls.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(verify_module, 'find_mismatch', counting)
    local = str(tmp_path / 'local')

    def run() -> None:
        with ShardRotation(shards, local, seq_len=SEQ, keep=None, prefetch=2) as rotation:
            for k in range(3):
                assert np.array_equal(rotation.dataset.tokens, tokens_for(k, 16 * SEQ))
                rotation.advance()
            rotation.close(wait=True)

    run()
    assert sorted(calls) == ['train_000000.npy', 'train_000001.npy', 'train_000002.npy']
    markers = sorted(n for n in os.listdir(local) if n.endswith('.verified'))
    assert markers == ['.train_000000.npy.verified', '.train_000001.npy.verified',
                       '.train_000002.npy.verified']
    calls.clear()
    run()  # Again in this process, the markers' checker: nothing is hashed (test_bit_rot.py
    # has a restart by another process).
    assert calls == []
    # A local copy changed on disk (a header padding byte: no window covers it) invalidates
    # the marker; the manifest's checksum catches it and the shard is fetched again.
    path = os.path.join(local, 'train_000001.npy')
    with open(path, 'r+b') as f:
        f.seek(100)
        f.write(b'#')
    store = ShardRotation(shards, local, seq_len=SEQ).store
    assert not store.verified(shards[1], SEQ)
    store.verify(shards[1], SEQ)
    assert calls == ['train_000001.npy', 'train_000001.npy']
    assert store.verified(shards[1], SEQ)
    with open(path, 'rb') as f:
        assert open(os.path.join(remote, 'train_000001.npy'), 'rb').read() == f.read()
    assert manifest is not None


def test_sample_id_is_the_windows_digest(tmp_path) -> None:
    remote = str(tmp_path / 'remote')
    numpy_dataset(remote, shards=1, windows=6)
    ds = TokenWindowDataset(os.path.join(remote, 'train_000000.npy'),
                            os.path.join(remote, 'sample_ids_000000.bin'), seq_len=SEQ,
                            labels=True, verify=True)
    for i in range(len(ds)):
        data = ds.window(i)[:SEQ].tobytes()
        assert ds.sample_id(i) == int.from_bytes(
            hashlib.blake2b(data, digest_size=8).digest(), 'little')
    assert ds.sample_id(-1) == ds.sample_id(len(ds) - 1)
    with pytest.raises(IndexError, match='window 99'):
        ds.sample_id(99)


def test_a_byte_flipped_in_transit_is_fixed_by_one_re_download(proxied, s3, tmp_path,
                                                                caplog) -> None:
    """Moto behind the fault proxy, no manifest (as in the source project's buckets): the
    first GET of shard 1 has one byte inverted; only the sidecar can notice."""
    client, bucket = s3
    remote, proxy = proxied(3, 32)
    client.delete_object(Bucket=bucket, Key='ds/manifest.json')
    shards, manifest = list_shards(remote)
    assert manifest is None and len(shards) == 3
    proxy.rule = lambda m, p, n: 'flip' if m == 'GET' and 'train_000001' in p and n == 0 \
        else None
    with caplog.at_level(logging.WARNING, 'streaming.tokens'), \
            ShardRotation(shards, str(tmp_path / 'local'), seq_len=SEQ, keep=2) as rotation:
        for k in range(3):
            ds = rotation.dataset
            assert np.array_equal(ds.batch(list(range(len(ds)))).numpy().reshape(-1),
                                  tokens_for(k, 32 * SEQ))
            rotation.advance()
    assert [fault for fault, _, _ in proxy.injected] == ['flip']
    assert gets(proxy, 1) == 2 and gets(proxy, 2) == 1
    warned = [r.getMessage() for r in caplog.records if 'downloading it again' in r.getMessage()]
    assert len(warned) == 1 and 'train_000001.npy: window' in warned[0], warned


def test_the_active_shard_is_repaired_under_its_readers(proxied, s3, tmp_path) -> None:
    """The first shard (foreground, unverified) arrives with a byte flipped in transit. Its
    readers, the downloading rank and another rank of the node, hit the bad window, wait for
    the background pass's re-download, map the new copy and serve the right tokens."""
    client, bucket = s3
    remote, proxy = proxied(2, 64)
    client.delete_object(Bucket=bucket, Key='ds/manifest.json')
    shards, _ = list_shards(remote)
    proxy.rule = lambda m, p, n: 'flip' if m == 'GET' and 'train_000000' in p and n == 0 \
        else None
    local = str(tmp_path / 'local')
    expected = tokens_for(0, 64 * SEQ).reshape(64, SEQ)
    with ShardRotation(shards, local, seq_len=SEQ, keep=2, prefetch=0,
                       world=World(0, 2, 0, 2)) as downloader:
        ds = downloader.dataset
        other = ShardRotation(shards, local, seq_len=SEQ, keep=2, prefetch=0,
                              world=World(1, 2, 1, 2)).dataset
        first = ds.verifier  # ds mapped the flipped copy when it became active
        for reader in (ds, other):
            got = reader.batch(list(range(64)))
            assert np.array_equal(got.numpy(), expected)
        assert ds.verifier is not first  # the mismatch was found, then the new copy mapped
    assert [fault for fault, _, _ in proxy.injected] == ['flip']
    assert gets(proxy, 0) == 2
    assert os.path.exists(os.path.join(local, '.train_000000.npy.verified'))


def test_the_error_survives_pickling_and_dataloader_workers(tmp_path) -> None:
    import pickle

    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
    remote = str(tmp_path / 'remote')
    numpy_dataset(remote, shards=1, windows=8)
    flip(os.path.join(remote, 'train_000000.npy'), window=6)
    ds = TokenWindowDataset(os.path.join(remote, 'train_000000.npy'),
                            os.path.join(remote, 'sample_ids_000000.bin'), seq_len=SEQ,
                            verify=True, shard=0)
    with pytest.raises(ShardCorruptError) as caught:
        ds.batch([6])
    again = pickle.loads(pickle.dumps(caught.value))
    assert (again.shard, again.window, again.expected, again.actual, str(again)) == \
        (0, 6, caught.value.expected, caught.value.actual, str(caught.value))
    loader = DataLoader(ds, batch_size=None, num_workers=2,
                        sampler=BatchSampler(SequentialSampler(range(8)), 2, False))
    with pytest.raises(ShardCorruptError, match='window 6'):
        for _ in loader:
            pass


def test_with_labels_the_extra_token_is_checked_too(tmp_path) -> None:
    """Window 2's label token is window 3's first: a flip there stops window 2."""
    remote = str(tmp_path / 'remote')
    numpy_dataset(remote, shards=1, windows=6)
    flip(os.path.join(remote, 'train_000000.npy'), window=3, offset_in_window=0)
    ds = TokenWindowDataset(os.path.join(remote, 'train_000000.npy'),
                            os.path.join(remote, 'sample_ids_000000.bin'), seq_len=SEQ,
                            labels=True, verify=True)
    assert ds.batch([0, 1]).shape == (2, SEQ + 1)
    with pytest.raises(ShardCorruptError, match='window 3'):
        ds.batch([2])
    with pytest.raises(ShardCorruptError, match='window 3'):
        ds[2]  # noqa: B018
