"""Draw docs/architecture.png: the package's layers and the path a sample takes.

    .venv/bin/python docs/figures/architecture.py

Left: the packages as layers, each importing only the layers below it (the import-cycle test in
tests/test_import_cycles.py keeps it that way). Right: the data's path from a writer to a sample.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), 'architecture.png')

# (row, label, detail, colour); row 0 is the top. Boxes on one row sit side by side.
LAYERS = [
    [('cli / convert', 'streaming command, Spark and\nparallel conversion', '#f4cccc'),
     ('base, text, vision,\nmultimodal', "the reference's import\npaths, thin aliases", '#f4cccc')],
    [('dataset', 'StreamingDataset (glue), Stream,\nShardCache, epochs, DatasetConfig',
      '#fce5cd'),
     ('tokens', 'token shards, windows,\nsamplers, rotation', '#fce5cd'),
     ('writing', 'public writers: format\nwriters + uploader hook', '#fce5cd')],
    [('order', 'pure numpy: sampling, shuffle\nregistry, batching, partition', '#d9ead3'),
     ('coord', 'node-shared directories,\nlocks, member liveness', '#d9ead3'),
     ('sources', 'Parquet, JSONL, tar, Arrow\nread in place: index, units', '#d9ead3')],
    [('format', 'format registry, encodings,\nreaders, writers, index', '#cfe2f3'),
     ('storage', 'backend registry, transport,\nretry, download, upload', '#cfe2f3')],
    [('fileio, errors, util', 'atomic files, typed errors,\nquantities', '#e6e6e6')],
]

PATH = [('writer', 'samples -> encoded shard files'),
        ('shards + index.json', 'one entry per shard, validated once'),
        ('storage', 'upload to / download from a remote'),
        ('order', 'epoch order per node, rank, worker'),
        ('cache', 'node-wide, LRU under cache_limit'),
        ('sample', 'memory-mapped read, decoded')]


def _box(ax, x: float, y: float, w: float, h: float, title: str, detail: str,
         colour: str) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle='round,pad=0.008', fc=colour, ec='#444'))
    ax.text(x + w / 2, y + h * 0.68, title, ha='center', va='center', fontsize=10,
            fontweight='bold')
    ax.text(x + w / 2, y + h * 0.3, detail, ha='center', va='center', fontsize=7.5)


def main() -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 7),
                                      gridspec_kw={'width_ratios': [2.2, 1]})
    for ax in (left, right):
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.axis('off')
    left.set_title('Layers: each imports only what lies below it', fontsize=12)
    row_h, gap, col_gap = 0.14, 0.055, 0.04
    for row, boxes in enumerate(LAYERS):
        y = 1 - (row + 1) * (row_h + gap)
        width = (0.96 - col_gap * (len(boxes) - 1)) / len(boxes)
        for col, (title, detail, colour) in enumerate(boxes):
            _box(left, 0.02 + col * (width + col_gap), y, width, row_h, title, detail, colour)
        if row:
            for x in (0.2, 0.5, 0.8):  # Imports point down, from this row's upper neighbour.
                left.add_patch(FancyArrowPatch((x, y + row_h + gap - 0.012), (x, y + row_h + 0.012),
                                               arrowstyle='-|>', mutation_scale=12, color='#888'))
    right.set_title("A sample's path", fontsize=12)
    step_h = 0.11
    for i, (title, detail) in enumerate(PATH):
        y = 1 - (i + 1) * (step_h + 0.045)
        _box(right, 0.08, y, 0.84, step_h, title, detail, '#fff2cc')
        if i:
            right.add_patch(FancyArrowPatch((0.5, y + step_h + 0.045), (0.5, y + step_h),
                                            arrowstyle='-|>', mutation_scale=14, color='#444'))
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(OUT)


if __name__ == '__main__':
    main()
