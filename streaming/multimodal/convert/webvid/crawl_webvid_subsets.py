"""Crawl the WebVid videos whose name contains given words, one MDS dataset per word.

``python -m streaming.multimodal.convert.webvid.crawl_webvid_subsets --csv FILE --filters
cat,dog --mds_root OUT [--num_procs 64] [--limit N]``. A video matching several words goes to
each of their datasets; at the end, the subsets are mixed in equal proportions and a few epochs
of names are printed as a check.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser, Namespace
from multiprocessing import Pool
from typing import Any, Iterator

from streaming.dataset.dataset import StreamingDataset
from streaming.dataset.stream import Stream
from streaming.multimodal.convert.webvid.common import (
    digits_pattern,
    download,
    duration_pattern,
    each_row,
    head,
    parse_duration,
)
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'Stream', 'StreamingDataset', 'digits_pattern', 'download',
           'duration_pattern', 'each_todo', 'get_matches', 'head', 'main', 'parse_args',
           'parse_duration']

COLUMNS = {'videoid': 'str', 'name': 'str', 'page_dir': 'str', 'duration': 'int',
           'contentUrl': 'str', 'content': 'bytes'}


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--csv', type=str, required=True, help='WebVid CSV file')
    parser.add_argument('--filters', type=str, required=True,
                        help='Comma-separated words; one subset per word')
    parser.add_argument('--mds_root', type=str, required=True, help='Output root directory')
    parser.add_argument('--num_procs', type=int, default=64, help='Download processes')
    parser.add_argument('--limit', type=int, default=-1, help='Rows to crawl (-1: all)')
    return parser.parse_args()


def get_matches(filters: list[str], text: str) -> list[str]:
    """The filters that occur in ``text``."""
    return [word for word in filters if word in text]


def each_todo(filename: str, filters: list[str]) -> Iterator[dict[str, Any]]:
    """The CSV rows whose name matches a filter, with their ``matches``."""
    for row in each_row(filename):
        matches = get_matches(filters, row['name'])
        if matches:
            yield {**row, 'matches': matches}


def main(args: Namespace) -> None:
    """Crawl into one dataset per filter word, then print a few mixed epochs."""
    filters = [word for word in args.filters.split(',') if word]
    writers: dict[str, MDSWriter] = {}
    with Pool(args.num_procs) as pool:
        for sample in pool.imap_unordered(download, head(each_todo(args.csv, filters),
                                                         args.limit)):
            if not sample:
                continue
            for word in sample['matches']:
                if word not in writers:
                    writers[word] = MDSWriter(out=os.path.join(args.mds_root, word),
                                              columns=COLUMNS)
                writers[word].write({key: sample.get(key, '') for key in COLUMNS})
    for writer in writers.values():
        writer.finish()
    present = sorted(writers)
    if not present:
        print('No videos matched the filters.')
        return
    streams = [Stream(local=os.path.join(args.mds_root, word), proportion=1 / len(present))
               for word in present]
    dataset = StreamingDataset(streams=streams, epoch_size=50, batch_size=1)
    for word, count in zip(present, dataset.samples_per_stream):
        print(f'Subset "{word}": {count} samples')
    for epoch in range(3):
        print(f'Epoch {epoch}:')
        for i, sample in enumerate(dataset):
            print(f'{i:6} | {" ".join(sample["name"].split())}')


if __name__ == '__main__':
    main(parse_args())
