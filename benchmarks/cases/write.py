"""Case 1: write throughput of ``MDSWriter`` (samples/s and MB/s), uncompressed or zstd.

The samples are built in memory first (not timed); the clock covers the writer from its
constructor to ``finish()`` (all shards compressed, hashed if asked, and on disk). The output goes
to a scratch directory that is deleted afterwards.

Params: ``{"data_dir", "dataset", "out", "compression"}``.
"""

from __future__ import annotations

import gc
import os
import shutil
from typing import Any

import harness
import sources


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    if impl == 'litdata':
        raise harness.Unsupported('LitData writes with optimize() (process pool), not compared')
    streaming = harness.import_impl(impl)
    source = sources.Source(params['data_dir'], params['dataset'])
    samples = source.load_all()
    payload = source.total_payload_bytes()
    out = params['out']
    if os.path.exists(out):
        shutil.rmtree(out)
    gc.collect()
    try:
        with harness.Stopwatch() as sw:
            with streaming.MDSWriter(out=out, columns=sources.COLUMNS[params['dataset']],
                                     compression=params['compression']) as writer:
                for sample in samples:
                    writer.write(sample)
        on_disk = sum(entry.stat().st_size for entry in os.scandir(out))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        'seconds': sw.seconds,
        'samples_per_s': len(samples) / sw.seconds,
        'mb_per_s': payload / sw.seconds / 1e6,
        'bytes_on_disk': on_disk,
    }


if __name__ == '__main__':
    harness.main(run)
