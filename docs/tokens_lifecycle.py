"""Draw docs/tokens_lifecycle.png: the life of token shards under ShardRotation.

    .venv/bin/python docs/tokens_lifecycle.py

Three shards cycled with ``keep=2, prefetch=1``: what local rank 0 downloads, which shard
training reads, what is on disk, and where swaps and evictions happen, on one time axis.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

COLORS = ['#4C72B0', '#DD8452', '#55A868']
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tokens_lifecycle.png')

# (shard, start, end) in arbitrary time units. Training windows are 10 long; downloads 4.
DOWNLOADS = [(0, 0, 4), (1, 4, 8), (2, 14, 18), (0, 24, 28.5), (1, 34.5, 38.5)]
ACTIVE = [(0, 4, 14), (1, 14, 24), (2, 24, 34.5), (0, 34.5, 44)]
ON_DISK = {0: [(0, 14), (24, 44)], 1: [(4, 24), (34.5, 44)], 2: [(14, 34.5)]}
SWAPS = [14, 24, 34.5]
EVICTIONS = [(14, 0), (24, 1), (34.5, 2)]


def main() -> None:
    fig, ax = plt.subplots(figsize=(11, 4.6), dpi=110)
    lanes = {'download\n(local rank 0)': 4.0, 'training reads': 3.0,
             'on disk: shard 0': 2.0, 'shard 1': 1.4, 'shard 2': 0.8}
    for shard, start, end in DOWNLOADS:
        first = start == 0
        ax.broken_barh([(start, end - start)], (lanes['download\n(local rank 0)'] - 0.25, 0.5),
                       color=COLORS[shard], alpha=0.9 if first else 0.55,
                       hatch=None if first else '//', edgecolor='white')
        ax.text((start + end) / 2, lanes['download\n(local rank 0)'],
                f'S{shard}' + (' (blocks)' if first else ''), ha='center', va='center',
                fontsize=8, color='black')
    for shard, start, end in ACTIVE:
        ax.broken_barh([(start, end - start)], (lanes['training reads'] - 0.25, 0.5),
                       color=COLORS[shard])
        ax.text((start + end) / 2, lanes['training reads'], f'shard {shard}', ha='center',
                va='center', fontsize=9, color='white', weight='bold')
    for shard, spans in ON_DISK.items():
        lane = list(lanes.values())[2 + shard]
        for start, end in spans:
            ax.broken_barh([(start, end - start)], (lane - 0.18, 0.36), color=COLORS[shard],
                           alpha=0.35)
    for x in SWAPS:
        ax.axvline(x, color='#333333', lw=1, ls='--')
        ax.text(x, 4.55, 'swap', ha='center', fontsize=8)
    for x, shard in EVICTIONS:
        lane = list(lanes.values())[2 + shard]
        ax.plot([x], [lane], marker='x', color='#C44E52', ms=9, mew=2)
    ax.text(30, 0.25, '1st cycle ends: shard 0 is fetched again (it was evicted); with '
            'keep=None it would still be on disk', fontsize=8, ha='center', color='#444444')
    ax.set_yticks(list(lanes.values()), list(lanes.keys()))
    ax.set_ylim(0, 4.8)
    ax.set_xlim(0, 44)
    ax.set_xlabel('time (training windows of 10 units; a shard download takes 4)')
    ax.set_title('ShardRotation, keep=2, prefetch=1: at most two shards on disk; '
                 'x = evicted to make room for the next prefetch', fontsize=10)
    for side in ('top', 'right'):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    fig.savefig(OUT)
    print(f'wrote {OUT}')


if __name__ == '__main__':
    main()
