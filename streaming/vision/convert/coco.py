"""Convert COCO 2017 detection to MDS.

The input is ``{split}2017/`` images and ``annotations/instances_{split}2017.json``.

``python -m streaming.vision.convert.coco --in_root DIR --out_root OUT``. Columns: ``img``
(jpeg, original bytes), ``img_id``, ``htot``, ``wtot`` (int), ``bbox_sizes``
(``ndarray:float32``, rows of left, top, right, bottom as fractions of the image size) and
``bbox_labels`` (``ndarray:int64``, category ranks from 1; 0 is the background). Images without
boxes are skipped.
"""

from __future__ import annotations

import json
import os
from argparse import Namespace
from typing import Any, Iterable

import numpy as np

from streaming.util import get_list_arg
from streaming.vision.convert.base import _progress, common_parser, warn_count
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'each', 'get_list_arg', 'load_split', 'main', 'parse_args']

_FULL = {'train': 117266, 'val': 4952}
_COLUMNS = {'img': 'jpeg', 'img_id': 'int', 'htot': 'int', 'wtot': 'int',
            'bbox_sizes': 'ndarray:float32', 'bbox_labels': 'ndarray:int64'}


def parse_args() -> Namespace:
    """Command-line arguments."""
    return common_parser('Convert COCO 2017 detection to MDS.', size_limit=1 << 25).parse_args()


def load_split(in_root: str, split: str) -> list[dict[str, Any]]:
    """One record per image with boxes: path, id, size, boxes and labels."""
    images_dir = os.path.join(in_root, f'{split}2017')
    annotations = os.path.join(in_root, 'annotations', f'instances_{split}2017.json')
    for path in (images_dir, annotations):
        if not os.path.exists(path):
            raise FileNotFoundError(f'COCO path not found: {path}')
    with open(annotations) as f:
        data = json.load(f)
    label = {cat['id']: rank for rank, cat in enumerate(data['categories'], 1)}
    records: dict[int, dict[str, Any]] = {}
    for image in data['images']:
        if image['id'] in records:
            raise ValueError(f'{annotations}: image id {image["id"]} appears twice.')
        records[image['id']] = {'path': os.path.join(images_dir, image['file_name']),
                                'img_id': image['id'], 'htot': image['height'],
                                'wtot': image['width'], 'boxes': [], 'labels': []}
    for box in data['annotations']:
        record = records[box['image_id']]
        left, top, width, height = box['bbox']
        w, h = record['wtot'], record['htot']
        record['boxes'].append((left / w, top / h, (left + width) / w, (top + height) / h))
        record['labels'].append(label[box['category_id']])
    return [r for r in records.values() if r['boxes']]


def each(records: list[dict[str, Any]], shuffle: bool) -> Iterable[dict[str, Any]]:
    """The MDS sample of each record (in a random order if ``shuffle``)."""
    order = np.random.permutation(len(records)) if shuffle else np.arange(len(records))
    for i in order.tolist():
        record = records[i]
        with open(record['path'], 'rb') as f:
            yield {'img': f.read(), 'img_id': record['img_id'], 'htot': record['htot'],
                   'wtot': record['wtot'],
                   'bbox_sizes': np.array(record['boxes'], np.float32).reshape(-1, 4),
                   'bbox_labels': np.array(record['labels'], np.int64)}


def main(args: Namespace) -> None:
    """Convert each split to ``out_root/split``."""
    for split in get_list_arg(args.splits):
        records = load_split(args.in_root, split)
        warn_count('COCO', split, len(records), _FULL.get(split, len(records)))
        with MDSWriter(out=os.path.join(args.out_root, split), columns=_COLUMNS,
                       compression=args.compression or None,
                       hashes=get_list_arg(args.hashes), size_limit=args.size_limit,
                       progress_bar=bool(args.progress_bar)) as writer:
            samples = each(records, shuffle=split == 'train')
            for sample in _progress(list(samples), bool(args.progress_bar), bool(args.leave)):
                writer.write(sample)


if __name__ == '__main__':
    main(parse_args())
