"""The pre-tokenizer: text, jsonl and parquet sources, worker processes, HF tokenizers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from streaming.tokens import TokenWindowDataset, pretokenize
from streaming.tokens.format import Manifest, ids_name, token_name, window_ids

WORDS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta']
EOS = 0


def documents(n: int) -> list[str]:
    return [' '.join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(1 + i % 7))
            for i in range(n)]


def word_ids(text: str) -> list[int]:
    """A picklable toy tokenizer: one id per word (1..8)."""
    return [WORDS.index(w) + 1 for w in text.split()]


def expected_stream(docs: list[str]) -> np.ndarray:
    return np.array([t for d in docs for t in word_ids(d) + [EOS]], np.uint16)


def read_back(out: str) -> np.ndarray:
    manifest = Manifest.load(os.path.join(out, 'manifest.json'))
    parts = []
    for shard in manifest.shards:
        tokens = np.load(os.path.join(out, shard.tokens.basename))
        ids = np.fromfile(os.path.join(out, shard.ids.basename), '<u8')
        assert np.array_equal(ids, window_ids(tokens, manifest.seq_len))
        parts.append(tokens)
    return np.concatenate(parts)


@pytest.mark.parametrize('kind', ['txt', 'jsonl', 'parquet', 'iterable'])
def test_sources_pack_documents_with_eos(tmp_path, kind) -> None:
    docs = documents(500)
    if kind == 'txt':
        source = tmp_path / 'docs.txt'
        source.write_text('\n'.join(docs) + '\n')
    elif kind == 'jsonl':
        source = tmp_path / 'docs.jsonl'
        source.write_text(''.join(json.dumps({'text': d, 'id': i}) + '\n'
                                  for i, d in enumerate(docs)))
    elif kind == 'parquet':
        import pyarrow as pa
        import pyarrow.parquet as pq
        source = tmp_path / 'docs.parquet'
        pq.write_table(pa.table({'text': docs}), source, row_group_size=100)
    else:
        source = iter(docs)
    out = str(tmp_path / 'out')
    manifest = pretokenize(source if kind == 'iterable' else [str(source)], out,
                           tokenizer=word_ids, eos_id=EOS, seq_len=8, shard_tokens=8 * 50,
                           dtype='uint16', workers=0 if kind == 'iterable' else 2,
                           batch_docs=37, progress=False)
    stream = expected_stream(docs)
    assert np.array_equal(read_back(out), stream)
    assert sum(s.num_tokens for s in manifest.shards) == len(stream)
    assert all(s.num_tokens == 400 for s in manifest.shards[:-1])
    assert manifest.eos_id == EOS and manifest.dtype == 'uint16'


def test_shuffle_buffer_keeps_every_document(tmp_path) -> None:
    docs = documents(300)
    out = str(tmp_path / 'out')
    pretokenize(iter(docs), out, tokenizer=word_ids, eos_id=EOS, seq_len=4, shard_tokens=64,
                dtype='uint16', workers=0, shuffle_buffer=50, progress=False)
    got = read_back(out)
    assert not np.array_equal(got, expected_stream(docs))
    split = [tuple(x) for x in np.split(got, np.flatnonzero(got == EOS) + 1) if len(x)]
    assert sorted(split) == sorted(tuple(word_ids(d) + [EOS]) for d in docs)


def test_hugging_face_tokenizer_file_and_eos_by_name(tmp_path) -> None:
    tokenizers = pytest.importorskip('tokenizers')
    from tokenizers import models, pre_tokenizers
    vocab = {'<eos>': 0, '[UNK]': 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tokenizer = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = str(tmp_path / 'tokenizer.json')
    tokenizer.save(path)
    docs = documents(120) + ['alpha unknownword beta']
    out = str(tmp_path / 'out')
    manifest = pretokenize(iter(docs), out, tokenizer=path, eos_id='<eos>', seq_len=4,
                           shard_tokens=64, workers=2, progress=False)
    expected = [t for d in docs for t in
                [vocab.get(w, 1) for w in d.split()] + [0]]
    assert read_back(out).tolist() == expected
    assert manifest.tokenizer == path and manifest.dtype == 'uint32'
    ds = TokenWindowDataset(os.path.join(out, token_name('train', 0)),
                            os.path.join(out, ids_name(0)), seq_len=4)
    assert ds[0].tolist() == expected[:4]


def test_bad_sources_are_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match='nope.txt'):
        pretokenize([str(tmp_path / 'nope.txt')], str(tmp_path / 'o'), tokenizer=word_ids,
                    eos_id=0, seq_len=4, shard_tokens=16, workers=0, progress=False)
    bad = tmp_path / 'bad.jsonl'
    bad.write_text('{"text": "alpha"}\n{"body": "beta"}\n')
    with pytest.raises(ValueError, match=r'bad.jsonl, line 2.*text'):
        pretokenize([str(bad)], str(tmp_path / 'o2'), tokenizer=word_ids, eos_id=0, seq_len=4,
                    shard_tokens=16, workers=0, progress=False)
    with pytest.raises(ValueError, match='does not fit dtype uint16'):
        pretokenize(iter(['alpha']), str(tmp_path / 'o3'), tokenizer=lambda t: [70000],
                    eos_id=0, seq_len=4, shard_tokens=16, dtype='uint16', workers=0,
                    progress=False)


def test_straight_to_a_remote(s3, tmp_path) -> None:
    client, bucket = s3
    docs = documents(200)
    manifest = pretokenize(iter(docs), f's3://{bucket}/tok', tokenizer=word_ids, eos_id=EOS,
                           seq_len=8, shard_tokens=128, dtype='uint16', workers=0,
                           progress=False)
    keys = {o['Key'] for o in client.list_objects_v2(Bucket=bucket)['Contents']}
    assert 'tok/manifest.json' in keys
    for shard in manifest.shards:
        assert f'tok/{shard.tokens.basename}' in keys and f'tok/{shard.ids.basename}' in keys
