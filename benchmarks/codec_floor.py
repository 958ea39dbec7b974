"""What decompressing an epoch of snappy Parquet pages costs by itself, on one core and on two.

    .venv/bin/python -m benchmarks.codec_floor [--pages 20] [--page-mb 10] [--codec snappy]

The ``images`` benchmark files hold 200 MB of incompressible 100 KB values in 20 row groups of
one 10 MB page each. Whatever reads them must decompress those pages into fresh memory every
epoch; this times just that, with ``pyarrow.Codec`` into the system allocator's memory (as
``streaming.sources.parquet_pages`` does), in a process that has imported torch like a training
job. It is the floor under any Parquet reader's epoch there (see docs/sources/parquet.md,
"Performance"). Prints seconds for one thread, then for two threads (after the first pass's
buffers are freed).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--pages', type=int, default=20)
    parser.add_argument('--page-mb', type=int, default=10)
    parser.add_argument('--codec', default='snappy')
    args = parser.parse_args()
    import pyarrow as pa
    import torch  # noqa: F401 - measured in a process like a training job's.
    codec, pool = pa.Codec(args.codec), pa.system_memory_pool()
    size = args.page_mb * 1_000_000
    pages = [codec.compress(os.urandom(size), asbytes=True) for _ in range(args.pages)]

    def one(page: bytes) -> object:
        return codec.decompress(page, decompressed_size=size, memory_pool=pool)

    started = time.perf_counter()
    out = [one(page) for page in pages]
    alone = time.perf_counter() - started
    del out
    with ThreadPoolExecutor(2) as threads:
        started = time.perf_counter()
        out = list(threads.map(one, pages))
        two = time.perf_counter() - started
    assert len(out) == len(pages)
    total = args.pages * args.page_mb
    print(f'{args.codec}: {total} MB decompressed in {alone:.3f} s on one thread, '
          f'{two:.3f} s on two')


if __name__ == '__main__':
    main()
