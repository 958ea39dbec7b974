"""Move the videos of an MDS WebVid dataset out of its shards, into one file each.

``python -m streaming.multimodal.convert.webvid.extract_webvid_videos --in IN --out_mds OUT
--out_mp4 VIDEOS``: sample ``i``'s ``content`` goes to ``VIDEOS/{i // 1000:03}/{i % 1000:03}.mp4``
and the new dataset holds that relative path as ``content_path`` (read it with
``StreamingOutsideGIWebVid(extra_local=..., extra_remote=VIDEOS)``).
"""

from __future__ import annotations

import os
from argparse import ArgumentParser, Namespace

from streaming.local_dataset import LocalDataset
from streaming.util import get_list_arg
from streaming.writing import MDSWriter

# The reference's script used StreamingDataset; the local map-style reader does the same job.
StreamingDataset = LocalDataset

__all__ = ['MDSWriter', 'StreamingDataset', 'main', 'out_columns', 'parse_args']

out_columns = {'videoid': 'str', 'name': 'str', 'page_idx': 'str', 'page_dir': 'str',
               'duration': 'int', 'contentUrl': 'str', 'content_path': 'str'}


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--in', type=str, required=True, help='MDS dataset with the videos')
    parser.add_argument('--out_mds', type=str, required=True, help='Output MDS directory')
    parser.add_argument('--out_mp4', type=str, required=True, help='Output video directory')
    parser.add_argument('--compression', type=str, default='zstd:16')
    parser.add_argument('--hashes', type=str, default='sha1,xxh3_64')
    parser.add_argument('--size_limit', type=int, default=1 << 25)
    return parser.parse_args()


def main(args: Namespace) -> None:
    """Write every video to its file and the rest of each sample to the new dataset."""
    dataset = StreamingDataset(getattr(args, 'in'))
    with MDSWriter(out=args.out_mds, columns=out_columns, compression=args.compression or None,
                   hashes=get_list_arg(args.hashes), size_limit=args.size_limit) as out:
        for i in range(len(dataset)):
            sample = dict(dataset[i])
            content_path = f'{i // 1000:03}/{i % 1000:03}.mp4'
            path = os.path.join(args.out_mp4, content_path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'wb') as f:
                f.write(sample.pop('content'))
            sample['content_path'] = content_path
            out.write({key: sample.get(key, '') for key in out_columns})


if __name__ == '__main__':
    main(parse_args())
