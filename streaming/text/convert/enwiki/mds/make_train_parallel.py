"""Write BERT pre-training samples as MDS with one ``create_pretraining_data.py`` per CPU.

``python -m streaming.text.convert.enwiki.mds.make_train_parallel --in_root DIR --out_root OUT``
splits the input shards (``--in_pattern``, ``--in_num_shards``) into one contiguous slice per
CPU and writes slice ``k`` to ``OUT/group-k`` (``--out_pattern``); merge the groups afterwards
with ``merge_shard_groups``. See ``streaming.text.convert.enwiki.launch`` for how the BERT script
is found.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser, Namespace

from streaming.text.convert.enwiki.launch import run_slices

__all__ = ['main', 'parse_args']


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add('--in_root', type=str, required=True, help='Directory of the input text shards')
    add('--in_pattern', type=str, default='part-%05d-of-00500', help='Input shard name pattern')
    add('--in_num_shards', type=int, default=500, help='Number of input shards')
    add('--out_root', type=str, required=True, help='Directory for the group-* datasets')
    add('--out_pattern', type=str, default='group-%03d', help='Group directory name pattern')
    add('--compression', type=str, default='zstd:16', help='Shard compression')
    add('--hashes', type=str, default='sha1,xxh3_64', help='Comma-separated shard hashes')
    add('--size_limit', type=int, default=1 << 27, help='Shard size limit in bytes')
    add('--vocab_file', type=str, default='vocab.txt', help="The BERT model's vocabulary")
    add('--do_lower_case', type=int, default=1, help='Lower-case the text (uncased models)')
    add('--max_seq_length', type=int, default=512, help='Maximum sequence length')
    add('--max_predictions_per_seq', type=int, default=20,
        help='Maximum masked LM predictions per sequence')
    add('--random_seed', type=int, default=12345, help='Seed of the data generation')
    add('--dupe_factor', type=int, default=10,
        help='Times the input is used, each with other masks')
    add('--masked_lm_prob', type=float, default=0.15, help='Masked LM probability')
    add('--short_seq_prob', type=float, default=0.1,
        help='Probability of a sequence shorter than the maximum length')
    return parser.parse_args()


def main(args: Namespace) -> None:
    """Run the slices in parallel and wait for all of them."""

    def arguments(k: int, begin: int, end: int) -> list[str]:
        inputs = ','.join(os.path.join(args.in_root, args.in_pattern % i)
                          for i in range(begin, end))
        return ['--input_file', inputs, '--output_dir',
                os.path.join(args.out_root, args.out_pattern % k),
                '--compression', args.compression, '--hashes', args.hashes,
                '--size_limit', str(args.size_limit), '--vocab_file', args.vocab_file,
                '--do_lower_case', 'True' if args.do_lower_case else 'False',
                '--max_seq_length', str(args.max_seq_length),
                '--max_predictions_per_seq', str(args.max_predictions_per_seq),
                '--random_seed', str(args.random_seed), '--dupe_factor', str(args.dupe_factor),
                '--masked_lm_prob', str(args.masked_lm_prob),
                '--short_seq_prob', str(args.short_seq_prob)]

    run_slices(args.in_num_shards, os.cpu_count() or 1, arguments)


if __name__ == '__main__':
    main(parse_args())
