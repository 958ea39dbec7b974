"""Write BERT pre-training TFRecords with one ``create_pretraining_data.py`` per CPU.

``python -m streaming.text.convert.enwiki.tfrecord.make_train_parallel --input_pattern P
--output_pattern Q`` gives CPU ``k`` a contiguous slice of the ``--num_shards`` inputs
``P % i`` and the output file ``Q % k``. See ``streaming.text.convert.enwiki.launch`` for how the
BERT script is found.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser, Namespace

from streaming.text.convert.enwiki.launch import run_slices

__all__ = ['main', 'parse_args']

# The settings of BERT-large pre-training on English Wikipedia.
_FIXED = ['--vocab_file', 'vocab.txt', '--do_lower_case', 'True', '--max_seq_length', '512',
          '--max_predictions_per_seq', '76', '--masked_lm_prob', '0.15',
          '--random_seed', '12345', '--dupe_factor', '10']


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--input_pattern', type=str, required=True,
                        help='Input file pattern with one %%d for the shard number')
    parser.add_argument('--output_pattern', type=str, required=True,
                        help='Output file pattern with one %%d for the CPU number')
    parser.add_argument('--num_shards', type=int, default=500, help='Number of input shards')
    parser.add_argument('--num_cpus', type=int, default=0, help='Processes (0: every CPU)')
    return parser.parse_args()


def main(args: Namespace) -> None:
    """Run the slices in parallel and wait for all of them."""

    def arguments(k: int, begin: int, end: int) -> list[str]:
        inputs = ','.join(args.input_pattern % i for i in range(begin, end))
        return ['--input_file', inputs, '--output_file', args.output_pattern % k, *_FIXED]

    run_slices(args.num_shards, args.num_cpus or os.cpu_count() or 1, arguments)


if __name__ == '__main__':
    main(parse_args())
