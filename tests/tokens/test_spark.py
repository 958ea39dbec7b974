"""The Spark pre-tokenizer, on PySpark local mode with several partitions: its output is
byte-identical to the single-machine ``pretokenize`` over the same documents in order."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming.tokens import pretokenize
from streaming.tokens.format import Manifest, window_ids
from tests.convert.conftest import spark  # noqa: F401 - the shared local SparkSession.
from tests.tokens.test_pretokenize import WORDS, documents

pytestmark = pytest.mark.xdist_group('spark')


def tiny_tokenizer(path: str) -> None:
    """A word-level Hugging Face tokenizer built here (no download), saved to ``path``."""
    import tokenizers
    from tokenizers import models, pre_tokenizers
    vocab = {'<eos>': 0, '[UNK]': 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tokenizer = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token='[UNK]'))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(path)


def files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), 'rb') as f:
            out[name] = f.read()
    return out


@pytest.mark.parametrize('partitions,shard_tokens', [(5, 64), (3, 1000), (7, 4096)])
def test_spark_output_is_byte_identical_to_pretokenize(spark, tmp_path, partitions,  # noqa: F811
                                                       shard_tokens) -> None:
    pytest.importorskip('tokenizers')
    from streaming.tokens.spark import pretokenize_spark
    path = str(tmp_path / 'tokenizer.json')
    tiny_tokenizer(path)
    docs = documents(700) + ['alpha unknownword beta', '', 'gamma']
    df = spark.createDataFrame(spark.sparkContext.parallelize([(d,) for d in docs], partitions),
                               'text string')
    assert df.rdd.getNumPartitions() == partitions
    local, distributed = str(tmp_path / 'local'), str(tmp_path / 'spark')
    expected = pretokenize(iter(docs), local, tokenizer=path, eos_id='<eos>', seq_len=8,
                           shard_tokens=shard_tokens, workers=0, progress=False)
    got = pretokenize_spark(df, distributed, tokenizer=path, eos_id='<eos>', seq_len=8,
                            shard_tokens=shard_tokens)
    assert got == expected and len(got.shards) >= 1
    assert files(distributed) == files(local)  # shards, sidecars, manifest; no staging left
    if shard_tokens == 64:
        assert len(got.shards) > partitions  # shards straddle partitions
    manifest = Manifest.load(os.path.join(distributed, 'manifest.json'))
    stream = np.concatenate([np.load(os.path.join(distributed, s.tokens.basename))
                             for s in manifest.shards])
    for s in manifest.shards:
        ids = np.fromfile(os.path.join(distributed, s.ids.basename), '<u8')
        tokens = np.load(os.path.join(distributed, s.tokens.basename))
        assert np.array_equal(ids, window_ids(tokens, 8))
    assert int((stream == 0).sum()) == len(docs)  # one EOS per document, empty one included


def test_an_rdd_and_a_callable_and_bad_input(spark, tmp_path) -> None:  # noqa: F811
    from streaming.tokens.spark import pretokenize_spark
    from tests.tokens.test_pretokenize import word_ids
    docs = documents(300)
    rdd = spark.sparkContext.parallelize(docs, 4)
    local, distributed = str(tmp_path / 'local'), str(tmp_path / 'spark')
    pretokenize(iter(docs), local, tokenizer=word_ids, eos_id=0, seq_len=4, shard_tokens=100,
                dtype='uint16', workers=0, progress=False)
    pretokenize_spark(rdd, distributed, tokenizer=word_ids, eos_id=0, seq_len=4,
                      shard_tokens=100, dtype='uint16')
    assert files(distributed) == files(local)
    # Staging through the storage layer (here file://; s3:// etc. go the same way: uploads,
    # then ranged reads), its parts left behind for the caller.
    staged = str(tmp_path / 'staged')
    pretokenize_spark(rdd, staged, tokenizer=word_ids, eos_id=0, seq_len=4, shard_tokens=100,
                      dtype='uint16', staging=f'file://{tmp_path}/staging')
    assert files(staged) == files(local)
    assert sorted(os.listdir(tmp_path / 'staging')) == [f'part-{i:05d}.bin' for i in range(4)]
    df = spark.createDataFrame([('alpha',)], 'body string')
    with pytest.raises(ValueError, match="no column 'text'"):
        pretokenize_spark(df, str(tmp_path / 'x'), tokenizer=word_ids, eos_id=0, seq_len=4,
                          shard_tokens=16)
    with pytest.raises(ValueError, match='staging='):
        pretokenize_spark(rdd, 's3://bucket/out', tokenizer=word_ids, eos_id=0, seq_len=4,
                          shard_tokens=16)
    with pytest.raises(ValueError, match='multiple of seq_len'):
        pretokenize_spark(rdd, str(tmp_path / 'y'), tokenizer=word_ids, eos_id=0, seq_len=4,
                          shard_tokens=10)
