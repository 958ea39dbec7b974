"""The format, the window dataset, the samplers and the writer, on local files."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch

from streaming.tokens.dataset import TokenWindowDataset
from streaming.tokens.format import (
    Manifest,
    TokenFormatError,
    ids_name,
    npy_header,
    read_npy_layout,
    token_name,
    window_ids,
)
from streaming.tokens.sampler import BatchIndices, EpochSampler, WindowDrawSampler, window_seed
from tests.tokens.conftest import tokens_for, write_dataset


def test_header_is_what_numpy_writes_and_reads(tmp_path) -> None:
    for dtype in ('uint16', 'uint32'):
        path = str(tmp_path / f'{dtype}.npy')
        data = np.arange(1000, dtype=dtype)
        with open(path, 'wb') as f:
            f.write(npy_header(dtype, 1000))
            f.write(data.tobytes())
        assert np.array_equal(np.load(path), data)
        np.save(path, data)  # numpy's own header (also 128 bytes) is read the same way.
        layout = read_npy_layout(path)
        assert (layout.dtype, layout.count, layout.offset) == (np.dtype(dtype), 1000, 128)


def test_bad_token_files_are_named(tmp_path) -> None:
    path = str(tmp_path / 'x.npy')
    np.save(path, np.zeros((4, 4), np.uint32))
    with pytest.raises(TokenFormatError, match='x.npy.*1-D'):
        read_npy_layout(path)
    np.save(path, np.zeros(10, np.float32))
    with pytest.raises(TokenFormatError, match='x.npy.*dtype'):
        read_npy_layout(path)
    np.save(path, np.zeros(10, np.int64))
    with pytest.raises(TokenFormatError, match='x.npy'):
        read_npy_layout(path)
    np.save(path, np.zeros(100, np.uint16))
    with open(path, 'r+b') as f:
        f.truncate(150)
    with pytest.raises(TokenFormatError, match='x.npy.*truncated'):
        read_npy_layout(path)
    raw = str(tmp_path / 'raw.bin')
    np.arange(10, dtype='<u4').tofile(raw)
    with pytest.raises(TokenFormatError, match='raw.bin.*not a .npy'):
        read_npy_layout(raw)
    assert read_npy_layout(raw, 'uint32').count == 10


def test_writer_output_round_trips(tmp_path, seq) -> None:
    out = str(tmp_path / 'ds')
    manifest = write_dataset(out, shards=3, windows=10, tail=5 * seq + 3, dtype='uint16')
    assert [s.index for s in manifest.shards] == [0, 1, 2, 3]
    assert Manifest.load(os.path.join(out, 'manifest.json')) == manifest
    for entry in manifest.shards:
        tokens = np.load(os.path.join(out, token_name('train', entry.index)))
        expected = tokens_for(entry.index, 10 * seq if entry.index < 3 else 5 * seq + 3,
                              'uint16')
        assert tokens.dtype == np.uint16 and np.array_equal(tokens, expected)
        ids = np.fromfile(os.path.join(out, ids_name(entry.index)), '<u8')
        assert np.array_equal(ids, window_ids(expected, seq))
        assert entry.num_tokens == len(expected)
        assert entry.tokens.bytes == os.path.getsize(os.path.join(out, entry.tokens.basename))
        import xxhash
        with open(os.path.join(out, entry.tokens.basename), 'rb') as f:
            assert entry.tokens.hashes['xxh3_128'] == xxhash.xxh3_128(f.read()).hexdigest()
    assert not [n for n in os.listdir(out) if n.endswith('.tmp')]


def test_writer_rejects_bad_settings_and_ids(tmp_path) -> None:
    from streaming.tokens.writer import TokenShardWriter
    with pytest.raises(ValueError, match='shard_tokens.*multiple of seq_len'):
        TokenShardWriter(str(tmp_path), seq_len=16, shard_tokens=100)
    with TokenShardWriter(str(tmp_path / 'a'), seq_len=4, shard_tokens=8, dtype='uint16') as w:
        with pytest.raises(ValueError, match='70000.*uint16'):
            w.write([1, 2, 70000])
        with pytest.raises(ValueError, match='integers'):
            w.write([1.5])


def test_window_dataset_zero_copy_views_and_labels(tmp_path, seq) -> None:
    out = str(tmp_path / 'ds')
    write_dataset(out, shards=1, windows=8, dtype='uint32')
    tokens, ids = os.path.join(out, token_name('train', 0)), os.path.join(out, ids_name(0))
    data = tokens_for(0, 8 * seq)
    ds = TokenWindowDataset(tokens, ids, seq_len=seq)
    assert len(ds) == 8
    window = ds[3]
    assert window.dtype == torch.uint32 and window.shape == (seq,)
    assert np.array_equal(window.numpy(), data[3 * seq:4 * seq])
    assert np.shares_memory(window.numpy(), ds.tokens)  # a view, no copy
    window[0] = 12345  # copy-on-write: the file is untouched
    assert np.array_equal(np.load(tokens), data)
    assert ds.sample_id(5) == int(window_ids(data, seq)[5])
    labelled = TokenWindowDataset(tokens, ids, seq_len=seq, labels=True, as_tensor=False)
    assert len(labelled) == 7 and labelled[6].shape == (seq + 1,)
    assert np.array_equal(labelled[2], data[2 * seq:3 * seq + 1])
    with pytest.raises(IndexError):
        ds[8]
    again = pickle.loads(pickle.dumps(ds))  # the mapping is not pickled, the path is
    assert again._tokens is None and np.array_equal(again[1].numpy(), data[seq:2 * seq])
    assert len(pickle.dumps(ds)) < 4096


def test_sidecar_mismatch_names_both_files(tmp_path, seq) -> None:
    out = str(tmp_path / 'ds')
    write_dataset(out, shards=2, windows=8)
    tokens, other_ids = os.path.join(out, token_name('train', 0)), os.path.join(out, ids_name(1))
    TokenWindowDataset(tokens, other_ids, seq_len=seq)  # same length: accepted
    short = str(tmp_path / 'short.bin')
    np.zeros(7, '<u8').tofile(short)
    with pytest.raises(TokenFormatError, match=r'short\.bin holds 7 .*train_000000\.npy'):
        TokenWindowDataset(tokens, short, seq_len=seq)
    with_header = str(tmp_path / 'with_header.bin')
    np.save(with_header, np.zeros(8, '<u8'))
    os.replace(with_header + '.npy', with_header)
    with pytest.raises(TokenFormatError, match='with_header.bin.*train_000000'):
        TokenWindowDataset(tokens, with_header, seq_len=seq)


def test_manifest_errors_name_the_file() -> None:
    with pytest.raises(TokenFormatError, match='m.json.*format'):
        Manifest.from_json(json.dumps({'format': 'other'}), 'm.json')
    with pytest.raises(TokenFormatError, match='m.json.*dtype'):
        Manifest.from_json(json.dumps({'format': 'streaming-tokens', 'dtype': 'float32',
                                       'seq_len': 4, 'shards': []}), 'm.json')
    with pytest.raises(TokenFormatError, match='m.json'):
        Manifest.from_json('{not json', 'm.json')


@pytest.mark.parametrize('world,windows', [(1, 10), (3, 10), (4, 8), (5, 3)])
def test_epoch_sampler_exactly_once_and_resumable(world, windows) -> None:
    seen = []
    for rank in range(world):
        sampler = EpochSampler(windows, rank=rank, world_size=world, seed=7, epoch=2)
        mine = list(sampler)
        seen += mine
        half = len(mine) // 2
        resumed = EpochSampler(windows, rank=rank, world_size=world, seed=7)
        resumed.load_state_dict({**sampler.state_dict(), 'consumed': half})
        assert list(resumed) == mine[half:]
    assert sorted(seen) == list(range(windows))
    assert EpochSampler(windows, seed=7, epoch=2).order().tolist() != \
        EpochSampler(windows, seed=7, epoch=3).order().tolist() or windows < 4
    trimmed = [len(EpochSampler(windows, rank=r, world_size=world, drop_last=True))
               for r in range(world)]
    assert len(set(trimmed)) == 1


def test_window_draw_sampler_is_deterministic_and_rank_strided() -> None:
    assert window_seed(5, 9) == ((5 * 1_000_003) ^ 9) & 0xFFFFFFFF
    pools = [WindowDrawSampler(1000, 40, uid=5, window=9, rank=r, world_size=4)
             for r in range(4)]
    union = sorted(i for s in pools for i in s)
    assert len(union) == 40 and len(set(union)) == 40
    assert list(pools[1]) == list(WindowDrawSampler(1000, 40, uid=5, window=9, rank=1,
                                                    world_size=4))
    assert list(pools[0]) != list(WindowDrawSampler(1000, 40, uid=5, window=10, rank=0,
                                                    world_size=4))
    state = {**pools[2].state_dict(), 'consumed': 3}
    again = WindowDrawSampler(1000, 40, uid=5, rank=2, world_size=4)
    again.load_state_dict(state)
    assert list(again) == list(pools[2])[3:]
    with pytest.raises(ValueError, match='uid'):
        WindowDrawSampler(1000, 40, uid=6).load_state_dict(state)
    with pytest.raises(ValueError, match='pool_size'):
        WindowDrawSampler(10, 11, uid=1)


def test_dataloader_workers_split_a_rank_exactly_once(tmp_path, seq) -> None:
    out = str(tmp_path / 'ds')
    write_dataset(out, shards=1, windows=30)
    ds = TokenWindowDataset(os.path.join(out, token_name('train', 0)),
                            os.path.join(out, ids_name(0)), seq_len=seq)
    got = []
    for rank in range(2):
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                             sampler=EpochSampler(len(ds), rank=rank,
                                                                  world_size=2))
        for batch in loader:
            got += [int(row[0]) for row in batch]
    starts = sorted(int(ds[i][0]) for i in range(len(ds)))
    assert sorted(got) == starts


def test_batches_are_gathered_in_one_copy(tmp_path, seq) -> None:
    from torch.utils.data import BatchSampler, DataLoader
    out = str(tmp_path / 'ds')
    write_dataset(out, shards=1, windows=20, dtype='uint16')
    tokens = os.path.join(out, token_name('train', 0))
    ds = TokenWindowDataset(tokens, seq_len=seq)
    batch = ds[[3, 0, 7]]
    assert batch.dtype == torch.uint16 and batch.shape == (3, seq)
    assert torch.equal(batch, torch.stack([ds[3], ds[0], ds[7]]))
    labelled = TokenWindowDataset(tokens, seq_len=seq, labels=True, as_tensor=False)
    assert np.array_equal(labelled.batch(np.array([18, 2])),
                          np.stack([labelled[18], labelled[2]]))
    with pytest.raises(IndexError, match='0, 20'):
        ds[[1, 20]]
    loader = DataLoader(ds, batch_size=None, num_workers=2,
                        sampler=BatchSampler(EpochSampler(len(ds), seed=1), 6, False))
    rows = torch.cat(list(loader))
    assert rows.shape == (20, seq)
    assert sorted(int(r[0]) for r in rows) == sorted(int(ds[i][0]) for i in range(20))


@pytest.mark.parametrize('drop_last', [False, True])
def test_batch_indices_are_batch_samplers_batches(tmp_path, drop_last) -> None:
    from torch.utils.data import BatchSampler, DataLoader
    for windows, consumed, size in ((20, 0, 6), (23, 5, 4), (7, 0, 7), (5, 5, 2)):
        sampler = EpochSampler(windows, seed=3, epoch=1, consumed=consumed)
        ours = [b.tolist() for b in BatchIndices(sampler, size, drop_last)]
        assert ours == list(BatchSampler(sampler, size, drop_last))
        assert len(BatchIndices(sampler, size, drop_last)) == len(ours)
    with pytest.raises(ValueError, match='batch_size'):
        BatchIndices(EpochSampler(4), 0)
    out = str(tmp_path / 'ds')
    write_dataset(out, shards=1, windows=20, dtype='uint32')
    ds = TokenWindowDataset(os.path.join(out, token_name('train', 0)), seq_len=8)
    batches = BatchIndices(EpochSampler(len(ds), seed=1), 6, drop_last)
    loaded = list(DataLoader(ds, batch_size=None, num_workers=2, sampler=batches))
    assert len(loaded) == len(batches) == (len(ds) // 6 if drop_last else -(-len(ds) // 6))
    assert all(torch.equal(a, ds.batch(b)) for a, b in zip(loaded, batches))


def test_batch_loader_gathers_in_process_like_a_dataloader(tmp_path) -> None:
    from torch.utils.data import DataLoader

    from streaming.tokens.loader import batch_loader
    out = str(tmp_path / 'ds')
    write_dataset(out, shards=1, windows=20, dtype='uint32')
    ds = TokenWindowDataset(os.path.join(out, token_name('train', 0)), seq_len=8)
    batches = BatchIndices(EpochSampler(len(ds), seed=2), 5)
    torch.manual_seed(11)
    plain = list(DataLoader(ds, batch_size=None, sampler=batches))
    after_plain = torch.rand(3)
    torch.manual_seed(11)
    ours = batch_loader(ds, batches)
    assert isinstance(ours, DataLoader) and len(ours) == len(plain)
    got = list(ours)
    assert torch.equal(torch.rand(3), after_plain)  # The same draw from torch's generator.
    assert len(got) == len(plain) and all(torch.equal(a, b) for a, b in zip(got, plain))
    collated = list(batch_loader(ds, batches, collate_fn=lambda b: b * 0))  # DataLoader's path.
    assert all(int(b.sum()) == 0 for b in collated) and len(collated) == len(plain)
