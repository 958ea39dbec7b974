"""Crawl the WebVid videos listed in one of its CSV files into an MDS dataset.

``python -m streaming.multimodal.convert.webvid.crawl_webvid --in results_2M_val.csv
--out_root OUT [--num_procs 64] [--limit N]``. Each row's ``contentUrl`` (any URL our storage
layer reads: http(s), s3, gs, file, ...) is fetched; rows whose video cannot be fetched are
skipped.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace
from multiprocessing import Pool
from typing import Any, Iterator

from streaming.multimodal.convert.webvid.common import (
    digits_pattern,
    download,
    duration_pattern,
    each_row,
    head,
    parse_duration,
)
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'digits_pattern', 'download', 'duration_pattern', 'each_todo', 'head',
           'main', 'parse_args', 'parse_duration']

COLUMNS = {'videoid': 'str', 'name': 'str', 'page_idx': 'str', 'page_dir': 'str',
           'duration': 'int', 'contentUrl': 'str', 'content': 'bytes'}


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--in', type=str, required=True, help='WebVid CSV file')
    parser.add_argument('--out_root', type=str, required=True, help='Output MDS directory')
    parser.add_argument('--num_procs', type=int, default=64, help='Download processes')
    parser.add_argument('--limit', type=int, default=-1, help='Rows to crawl (-1: all)')
    return parser.parse_args()


def each_todo(filename: str) -> Iterator[dict[str, Any]]:
    """The rows of the CSV."""
    return each_row(filename)


def main(args: Namespace) -> None:
    """Fetch the videos in parallel and write them with their metadata."""
    todos = head(each_todo(getattr(args, 'in')), args.limit)
    with Pool(args.num_procs) as pool, MDSWriter(out=args.out_root, columns=COLUMNS) as out:
        for sample in pool.imap_unordered(download, todos):
            if sample:
                out.write({key: sample.get(key, '') for key in COLUMNS})


if __name__ == '__main__':
    main(parse_args())
