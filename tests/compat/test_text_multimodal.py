"""streaming.text and streaming.multimodal: converters on local data, datasets reading them."""

from __future__ import annotations

import csv
import gzip
import json
import os
import sys
from typing import Any

import numpy as np
import pytest

from tests.compat.helpers import run_module, write_file
from tests.unit_helpers import write_mds

WORDS = ['the', 'cat', 'sat', 'on', 'mat', 'a', 'dog', 'ran']


@pytest.fixture(scope='module')
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny word-level tokenizer saved as a local transformers tokenizer (no hub)."""
    pytest.importorskip('transformers', reason='the [text] extra (transformers) is not installed')
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {word: i for i, word in enumerate(['[UNK]', '[EOS]', *WORDS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token='[UNK]'))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, unk_token='[UNK]', eos_token='[EOS]')
    path = str(tmp_path_factory.mktemp('tokenizer'))
    fast.save_pretrained(path)
    return path


def test_c4_convert_local_files_and_tokenize(tmp_path: Any, tokenizer_dir: str) -> None:
    from streaming.text import StreamingC4
    raw = tmp_path / 'raw' / 'en'
    records = {'train': [{'text': 'the cat sat', 'timestamp': '2019-01-01', 'url': 'u0'},
                         {'text': 'a dog ran on the mat', 'timestamp': '2019-01-02',
                          'url': 'u1'}],
               'validation': [{'text': 'the dog', 'timestamp': '2019-02-01', 'url': 'v0'}]}
    for split, rows in records.items():
        raw.mkdir(parents=True, exist_ok=True)
        with gzip.open(raw / f'c4-{split}.00000-of-00001.json.gz', 'wt') as f:
            f.writelines(json.dumps(row) + '\n' for row in rows)
    out = tmp_path / 'mds'
    run_module('streaming.text.convert.c4', '--in_root', str(tmp_path / 'raw'), '--out_root',
               str(out), '--progress_bar', '0')
    from streaming import LocalDataset
    assert [LocalDataset(str(out / 'train'))[i] for i in range(2)] == records['train']
    dataset = StreamingC4(local=str(out), split='train', tokenizer_name=tokenizer_dir,
                          max_seq_len=4, group_method='truncate', batch_size=1)
    first = dataset.get_item(0)
    assert list(first['input_ids']) == [2, 3, 4, 1]  # the cat sat [EOS-as-pad]
    assert list(first['attention_mask']) == [1, 1, 1, 0]
    assert len(dataset.get_item(1)['input_ids']) == 4  # truncated
    with pytest.raises(ValueError, match='truncate'):
        StreamingC4(local=str(out), split='train', tokenizer_name=tokenizer_dir,
                    max_seq_len=4, group_method='concat', batch_size=1)


def test_pile_convert_merge_and_tokenize(tmp_path: Any, tokenizer_dir: str) -> None:
    from streaming import LocalDataset
    from streaming.text import StreamingPile
    raw = tmp_path / 'raw'
    rows = {'train/00': ['the cat', 'a dog'], 'train/01': ['sat on', 'the mat', 'ran'],
            'val': ['the dog ran'], 'test': ['a cat']}
    for name, texts in rows.items():
        lines = [json.dumps({'text': t, 'meta': {'pile_set_name': f'set-{name[-1]}'}})
                 for t in texts]
        write_file(raw / f'{name}.jsonl', ('\n'.join(lines) + '\n').encode())
    out = tmp_path / 'mds'
    printed = run_module('streaming.text.convert.pile', '--in_root', str(raw), '--out_root',
                         str(out), '--size_limit', '64', '--compression', 'zstd')
    assert len(printed.strip().splitlines()) == 4
    train = LocalDataset(str(out / 'train'))  # The train files' shards merged into one index.
    assert sorted(s['text'] for s in (train[i] for i in range(len(train)))) == \
        sorted(rows['train/00'] + rows['train/01'])
    assert not [d for d in os.listdir(out / 'train') if os.path.isdir(out / 'train' / d)]
    pile = StreamingPile(local=str(out), split='val', tokenizer_name=tokenizer_dir,
                         max_seq_len=3, group_method='truncate', batch_size=1)
    assert list(pile.get_item(0)['input_ids']) == [2, 8, 9]


def test_enwiki_text_and_enwiki_dataset(tmp_path: Any) -> None:
    from streaming import LocalDataset
    from streaming.text import StreamingEnWiki
    raw = tmp_path / 'raw'
    raw.mkdir()
    for i in range(500):
        (raw / f'part-{i:05}-of-00500').write_text(f'passage {i}\n\n' if i % 100 == 0 else '')
    (raw / 'eval.txt').write_text('eval one\n  \neval two\n')
    out = tmp_path / 'mds'
    run_module('streaming.text.convert.enwiki_text', '--in_root', str(raw), '--out_root',
               str(out), '--progress_bar', '0')
    train = LocalDataset(str(out / 'train'))
    assert [train[i]['text'] for i in range(len(train))] == [f'passage {i}'
                                                             for i in range(0, 500, 100)]
    assert len(LocalDataset(str(out / 'val'))) == 2
    # The BERT pre-training layout: each column the bytes of a 1-D array.
    columns = {k: 'bytes' for k in ('input_ids', 'input_mask', 'segment_ids',
                                    'masked_lm_positions', 'masked_lm_ids',
                                    'masked_lm_weights', 'next_sentence_labels')}
    sample = {'input_ids': np.array([5, 6, 7, 8], np.int32).tobytes(),
              'input_mask': np.array([1, 1, 1, 0], np.int32).tobytes(),
              'segment_ids': np.array([0, 0, 1, 1], np.int32).tobytes(),
              'masked_lm_positions': np.array([1, 2], np.int32).tobytes(),
              'masked_lm_ids': np.array([60, 70], np.int32).tobytes(),
              'masked_lm_weights': np.array([1, 1], np.float32).tobytes(),
              'next_sentence_labels': np.array([0], np.int32).tobytes()}
    write_mds(str(tmp_path / 'bert'), columns, [sample] * 3)
    wiki = StreamingEnWiki(local=str(tmp_path / 'bert'), batch_size=1)
    got = wiki.get_item(0)
    assert got['input_ids'].tolist() == [5, 6, 7, 8]
    assert got['token_type_ids'].tolist() == [0, 0, 1, 1]
    assert got['labels'].tolist() == [-100, 60, 70, -100]
    # Picking evenly spaced eval samples.
    run_module('streaming.text.convert.enwiki.mds.pick_eval_samples', '--in_root',
               str(tmp_path / 'bert'), '--out_root', str(tmp_path / 'eval'),
               '--num_examples_to_pick', '2')
    assert len(LocalDataset(str(tmp_path / 'eval'))) == 2


def test_enwiki_merge_shard_groups(tmp_path: Any) -> None:
    from streaming import LocalDataset
    groups = tmp_path / 'groups'
    for g in range(3):
        write_mds(str(groups / f'group-{g:03}'), {'v': 'int'},
                  [{'v': 10 * g + i} for i in range(4)], size_limit=40, compression='zstd')
    run_module('streaming.text.convert.enwiki.mds.merge_shard_groups', '--in_root',
               str(groups), '--out_root', str(tmp_path / 'merged'))
    merged = LocalDataset(str(tmp_path / 'merged'))
    assert [merged[i]['v'] for i in range(len(merged))] == [10 * g + i for g in range(3)
                                                             for i in range(4)]
    assert not groups.exists()


def _webvid_csv(tmp_path: Any) -> tuple[str, dict[str, bytes]]:
    videos = {}
    rows = []
    for i, name in enumerate(['a cat video', 'a dog video', 'cat and dog', 'a bird']):
        data = os.urandom(100 + i)
        path = tmp_path / 'web' / f'{i}.mp4'
        write_file(path, data)
        videos[str(i)] = data
        rows.append({'videoid': str(i), 'contentUrl': path.as_uri(), 'duration': 'PT00H01M02S',
                     'page_idx': '1', 'page_dir': 'p', 'name': name})
    rows.append({'videoid': 'dead', 'contentUrl': (tmp_path / 'missing.mp4').as_uri(),
                 'duration': 'PT00H00M01S', 'page_idx': '1', 'page_dir': 'p', 'name': 'a cat'})
    path = str(tmp_path / 'webvid.csv')
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path, videos


def test_webvid_crawl_extract_and_read(tmp_path: Any) -> None:
    from streaming import LocalDataset
    from streaming.multimodal import StreamingInsideWebVid, StreamingOutsideGIWebVid
    csv_path, videos = _webvid_csv(tmp_path)
    inside = tmp_path / 'inside'
    run_module('streaming.multimodal.convert.webvid.crawl_webvid', '--in', csv_path,
               '--out_root', str(inside), '--num_procs', '2')
    crawled = LocalDataset(str(inside))
    assert sorted(crawled[i]['videoid'] for i in range(len(crawled))) == ['0', '1', '2', '3']
    assert all(crawled[i]['content'] == videos[crawled[i]['videoid']] and
               crawled[i]['duration'] == 62 for i in range(len(crawled)))
    in_ds = StreamingInsideWebVid(local=str(inside), batch_size=1)
    assert in_ds.get_item(0)['content'] == videos[in_ds.get_item(0)['videoid']]
    run_module('streaming.multimodal.convert.webvid.extract_webvid_videos', '--in', str(inside),
               '--out_mds', str(tmp_path / 'outside'), '--out_mp4', str(tmp_path / 'mp4'))
    outside = StreamingOutsideGIWebVid(local=str(tmp_path / 'outside'), batch_size=1,
                                       extra_local=str(tmp_path / 'cache'),
                                       extra_remote=str(tmp_path / 'mp4'))
    for i in range(len(outside)):
        sample = outside.get_item(i)
        assert sample['content'] == videos[sample['videoid']]
        assert os.path.exists(tmp_path / 'cache' / sample['content_path'])


def test_webvid_subsets(tmp_path: Any) -> None:
    from streaming import LocalDataset
    csv_path, _ = _webvid_csv(tmp_path)
    printed = run_module('streaming.multimodal.convert.webvid.crawl_webvid_subsets', '--csv',
                         csv_path, '--filters', 'cat,dog', '--mds_root', str(tmp_path / 'subs'),
                         '--num_procs', '2')
    cats = LocalDataset(str(tmp_path / 'subs' / 'cat'))
    dogs = LocalDataset(str(tmp_path / 'subs' / 'dog'))
    assert sorted(cats[i]['videoid'] for i in range(len(cats))) == ['0', '2']
    assert sorted(dogs[i]['videoid'] for i in range(len(dogs))) == ['1', '2']
    assert 'Subset "cat": 2 samples' in printed and 'Epoch 2:' in printed
    assert printed.count('    49 | ') == 3  # Three epochs of epoch_size=50 mixed samples.


def test_webvid_parse_duration() -> None:
    from streaming.multimodal.convert.webvid.crawl_webvid import head, parse_duration
    assert parse_duration('PT01H02M03S') == 3723
    with pytest.raises(ValueError, match='duration'):
        parse_duration('3 minutes')
    assert list(head(iter(range(10)), 3)) == [0, 1, 2]
    assert list(head(iter(range(3)), -1)) == [0, 1, 2]


def test_laion_convert_and_upload(tmp_path: Any) -> None:
    pytest.importorskip('pyarrow', reason='pyarrow (the [spark] extra) is not installed')
    import pyarrow as pa
    from pyarrow import parquet

    from streaming import LocalDataset
    local, remote = tmp_path / 'download', tmp_path / 'remote'
    local.mkdir()
    for idx in range(2):
        rows = [{'NSFW': 'UNLIKELY', 'similarity': 0.5 + i, 'LICENSE': None,
                 'caption': f'cap {idx}-{i}', 'url': 'u', 'key': f'{idx}{i}', 'status': 'success',
                 'error_message': None, 'width': 16, 'height': None, 'original_width': 20,
                 'original_height': 10, 'exif': '{}', 'jpg': bytes([idx, i])} for i in range(3)]
        parquet.write_table(pa.Table.from_pylist(rows), local / f'{idx:05}.parquet')
        (local / f'{idx:05}_stats.json').write_text('{}')
    (local / 'done').write_text('')
    run_module('streaming.multimodal.convert.laion.laion400m.convert_and_upload', '--local',
               str(local), '--remote', str(remote), '--poll_interval', '0', '--keep_mds', '0')
    dataset = LocalDataset(str(remote))
    samples = [dataset[i] for i in range(len(dataset))]
    assert [s['caption'] for s in samples] == [f'cap {idx}-{i}' for idx in range(2)
                                               for i in range(3)]
    first = samples[0]
    assert (first['license'], first['error_message'], first['jpg']) == ('', '', bytes([0, 0]))
    assert int(first['height']) == 0 and int(first['width']) == 16
    assert sorted(os.listdir(remote)) == ['index.json', 'shard.00000.mds', 'shard.00001.mds']


# A stand-in for BERT's create_pretraining_data.py (TensorFlow is not installed here): it records
# the arguments each launched process got, so the slicing and the exit status are what is tested.
_BERT_STAND_IN = '''
import json, os, sys
with open(os.path.join(os.path.dirname(__file__), f'call-{os.getpid()}.json'), 'w') as f:
    json.dump(sys.argv[1:], f)
sys.exit(3 if 'fail' in ' '.join(sys.argv) else 0)
'''


def _launched(tmp_path: Any) -> list[list[str]]:
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob('call-*.json'))]


@pytest.mark.parametrize('flavour', ['mds', 'tfrecord'])
def test_enwiki_make_train_parallel_launches_one_slice_per_cpu(tmp_path: Any, monkeypatch: Any,
                                                               flavour: str) -> None:
    from importlib import import_module
    module = import_module(f'streaming.text.convert.enwiki.{flavour}.make_train_parallel')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr('os.cpu_count', lambda: 3)
    with pytest.raises(FileNotFoundError, match='create_pretraining_data.py'):
        module.main(_enwiki_args(module, flavour, 'in'))
    (tmp_path / 'create_pretraining_data.py').write_text(_BERT_STAND_IN)
    module.main(_enwiki_args(module, flavour, 'in'))
    calls = _launched(tmp_path)
    assert len(calls) == 3
    inputs = sorted(c[c.index('--input_file') + 1] for c in calls)
    shards = [name for group in inputs for name in group.split(',')]
    assert len(shards) == 7 and len(set(shards)) == 7  # Every input shard exactly once.
    with pytest.raises(RuntimeError, match='failed for slice'):
        module.main(_enwiki_args(module, flavour, 'fail'))


def _enwiki_args(module: Any, flavour: str, root: str) -> Any:
    argv = (['--in_root', root, '--in_num_shards', '7', '--out_root', 'out'] if flavour == 'mds'
            else ['--input_pattern', root + '-%02d', '--output_pattern', 'out-%d',
                  '--num_shards', '7'])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, 'argv', ['make_train_parallel', *argv])
        return module.parse_args()
