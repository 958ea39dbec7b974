"""Convert LAION-400M parquet shards (as img2dataset writes them) to MDS while they download.

``python -m streaming.multimodal.convert.laion.laion400m.convert_and_upload --local DIR
--remote URL``: polls ``DIR`` for shards ``NNNNN.parquet`` whose ``NNNNN_stats.json`` says
img2dataset finished them, converts each to one MDS shard (uncompressed: it is mostly JPEG),
uploads it as ``URL/shard.NNNNN.mds``, and marks it ``NNNNN.done``. Once the file ``DIR/done``
exists (the download script writes it at the end), it uploads one ``index.json`` covering every
shard. Needs pyarrow (``pip install "shardflow[spark]"`` or ``pip install pyarrow``).
"""

from __future__ import annotations

import math
import os
import time
from argparse import ArgumentParser, Namespace
from typing import Any, Iterator

from streaming.base.storage import CloudUploader
from streaming.format.index import load_index, write_index
from streaming.storage.upload import upload_file
from streaming.util import get_list_arg
from streaming.writing import MDSWriter

__all__ = ['CloudUploader', 'MDSWriter', 'collect_and_upload_index', 'convert',
           'convert_and_upload_shards', 'each_downloaded_shard', 'get_bytes', 'get_float',
           'get_int', 'get_str', 'main', 'parse_args', 'upload']

COLUMNS = {'nsfw': 'str', 'similarity': 'float64', 'license': 'str', 'caption': 'str',
           'url': 'str', 'key': 'str', 'status': 'str', 'error_message': 'str',
           'width': 'int32', 'height': 'int32', 'original_width': 'int32',
           'original_height': 'int32', 'exif': 'str', 'jpg': 'bytes'}
# MDS column -> parquet column, where they differ.
_SOURCE = {'nsfw': 'NSFW', 'license': 'LICENSE'}


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--local', type=str, required=True,
                        help='Directory img2dataset downloads the parquet shards into')
    parser.add_argument('--remote', type=str, required=True,
                        help='Where to upload the MDS shards and index (path or URL)')
    parser.add_argument('--keep_parquet', type=int, default=1, help='Keep parquet files (1/0)')
    parser.add_argument('--keep_mds', type=int, default=1, help='Keep local MDS shards (1/0)')
    parser.add_argument('--hashes', type=str, default='sha1,xxh64', help='Shard hashes')
    parser.add_argument('--poll_interval', type=float, default=30,
                        help='Seconds between polls of the download directory')
    return parser.parse_args()


def each_downloaded_shard(local: str) -> Iterator[int]:
    """The ids of the shards img2dataset has finished (those with a stats file), in order."""
    count = sum(name.endswith('_stats.json') for name in os.listdir(local))
    for idx in range(count):
        if not os.path.exists(os.path.join(local, f'{idx:05}_stats.json')):
            raise RuntimeError(f'{local}: shard {idx:05} has no stats file, but {count} shards '
                               f'have one; the download directory is inconsistent.')
        yield idx


def get_int(x: float | int | None) -> int:
    """A parquet integer field (NaN or None when missing) as an int (0 when missing)."""
    return 0 if x is None or (isinstance(x, float) and math.isnan(x)) else int(x)


def get_float(x: float | None) -> float:
    """A parquet float field as a float (NaN when missing)."""
    return math.nan if x is None else float(x)


def get_bytes(x: bytes | None) -> bytes:
    """A parquet binary field (b'' when missing)."""
    return x or b''


def get_str(x: str | None) -> str:
    """A parquet string field ('' when missing)."""
    return x or ''


_GETTERS = {'str': get_str, 'float64': get_float, 'int32': get_int, 'bytes': get_bytes}


def convert(parquet_filename: str, mds_dirname: str, hashes: list[str]) -> None:
    """Write one parquet shard as one MDS shard (with its own index) in ``mds_dirname``."""
    from pyarrow import parquet
    rows = parquet.read_table(parquet_filename).to_pylist()
    with MDSWriter(out=mds_dirname, columns=COLUMNS, hashes=hashes, size_limit=None) as out:
        for row in rows:
            out.write({name: _GETTERS[encoding](row.get(_SOURCE.get(name, name)))
                       for name, encoding in COLUMNS.items()})


def upload(local: str, remote: str) -> None:
    """Upload the file ``local`` to ``remote`` (a full path or URL), keeping the local file."""
    upload_file(local, remote)


def _remote(root: str, name: str) -> str:
    return root.rstrip('/') + '/' + name if '://' in root else os.path.join(root, name)


def convert_and_upload_shards(args: Namespace) -> bool:
    """Convert and upload every finished shard not done yet.

    Returns whether the download is over (the ``done`` marker exists).
    """
    hashes = get_list_arg(args.hashes)
    for idx in each_downloaded_shard(args.local):
        done = os.path.join(args.local, f'{idx:05}.done')
        if os.path.exists(done):
            continue
        parquet_file = os.path.join(args.local, f'{idx:05}.parquet')
        mds_dir = os.path.join(args.local, f'{idx:05}.mds')
        shard = os.path.join(mds_dir, f'shard.{idx:05}.mds')
        if not os.path.exists(shard):
            if not os.path.exists(os.path.join(mds_dir, 'index.json')):
                print(f'Shard {idx:05}: converting...')
                convert(parquet_file, mds_dir, hashes)
            os.rename(os.path.join(mds_dir, 'shard.00000.mds'), shard)
        print(f'Shard {idx:05}: uploading...')
        upload(shard, _remote(args.remote, f'shard.{idx:05}.mds'))
        with open(done, 'w'):
            pass
        if not args.keep_parquet:
            os.remove(parquet_file)
        if not args.keep_mds:
            os.remove(shard)
        print(f'Shard {idx:05}: done')
    return os.path.exists(os.path.join(args.local, 'done'))


def collect_and_upload_index(args: Namespace) -> None:
    """Write and upload the index of all shards (each named as uploaded)."""
    shards: list[dict[str, Any]] = []
    for idx in each_downloaded_shard(args.local):
        info, = load_index(os.path.join(args.local, f'{idx:05}.mds', 'index.json'))['shards']
        info['raw_data']['basename'] = f'shard.{idx:05}.mds'
        shards.append(info)
    local = os.path.join(args.local, 'index.json')
    write_index(local, shards)
    upload(local, _remote(args.remote, 'index.json'))


def main(args: Namespace) -> None:
    """Poll until the download is over, converting as shards arrive; then upload the index."""
    while True:
        started = time.monotonic()
        if convert_and_upload_shards(args):
            break
        time.sleep(max(0.0, args.poll_interval - (time.monotonic() - started)))
    collect_and_upload_index(args)


if __name__ == '__main__':
    main(parse_args())
