"""What the token benchmarks share: the loopback object server, S3 settings, sizes, shards."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def serve(root: str, per_connection: int, aggregate: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, 'tokens_server.py'), root,
                             str(per_connection), str(aggregate)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()  # type: ignore[union-attr]


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()  # type: ignore[union-attr]
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def point_s3_at(url: str) -> None:
    os.environ.update(S3_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID='bench', AWS_SECRET_ACCESS_KEY='bench',
                      AWS_DEFAULT_REGION='us-east-1')
    from streaming.storage import registry
    registry._instances.clear()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float('nan')


def write_shards(root: str, shard_bytes: int, seq_len: int) -> None:
    """Three token shards of about ``shard_bytes`` each (uint32, random ids) under ``root``."""
    import numpy as np

    from streaming.tokens.writer import TokenShardWriter
    per = shard_bytes // 4 // seq_len * seq_len
    rng = np.random.default_rng(0)
    with TokenShardWriter(root, seq_len=seq_len, shard_tokens=per, ids=True) as writer:
        for _ in range(3):
            for start in range(0, per, 4 * MIB):
                writer.write(rng.integers(0, 200_000, min(4 * MIB, per - start), np.uint32))
