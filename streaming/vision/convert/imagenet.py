"""Convert an ImageNet-style folder tree (``in_root/split/class/image.jpeg``) to MDS.

``python -m streaming.vision.convert.imagenet --in_root DIR --out_root OUT``. Classes are the
sorted directory names (every split must have the same ones); images are stored as their
original JPEG bytes. Columns: ``i`` (int), ``x`` (jpeg), ``y`` (int class).
"""

from __future__ import annotations

import os
from argparse import Namespace
from glob import glob

import numpy as np

from streaming.util import get_list_arg
from streaming.vision.convert.base import _progress, common_parser
from streaming.writing import MDSWriter

__all__ = ['MDSWriter', 'check_extensions', 'get_classes', 'get_list_arg', 'main', 'parse_args']


def parse_args() -> Namespace:
    """Command-line arguments."""
    parser = common_parser(__doc__.splitlines()[0], size_limit=1 << 26)
    parser.add_argument('--validate', type=int, default=1,
                        help='Open every image with PIL to check it (1 or 0)')
    parser.add_argument('--extensions', type=str, default='jpeg',
                        help='Comma-separated allowed file extensions (default: jpeg)')
    return parser.parse_args()


def check_extensions(filenames: list[str], extensions: set[str]) -> None:
    """Raise ValueError naming the first file whose extension is not in ``extensions``."""
    for name in filenames:
        if os.path.splitext(name)[1][1:].lower() not in extensions:
            raise ValueError(f'{name}: extension not in {sorted(extensions)}.')


def get_classes(filenames: list[str],
                class_names: list[str] | None = None) -> tuple[list[int], list[str]]:
    """Each file's class index (its parent directory's rank), and the sorted class names.

    With ``class_names`` (another split's), the names must be the same.
    """
    names = sorted({os.path.basename(os.path.dirname(f)) for f in filenames})
    if class_names is not None and names != class_names:
        raise ValueError(f'Classes differ between splits: {names[:5]}... vs '
                         f'{class_names[:5]}...')
    index = {name: i for i, name in enumerate(names)}
    return [index[os.path.basename(os.path.dirname(f))] for f in filenames], names


def main(args: Namespace) -> None:
    """Convert each split to ``out_root/split``."""
    from PIL import Image
    extensions = set(get_list_arg(args.extensions))
    class_names = None
    for split in get_list_arg(args.splits):
        filenames = sorted(glob(os.path.join(args.in_root, split, '*', '*')))
        check_extensions(filenames, extensions)
        classes, class_names = get_classes(filenames, class_names)
        order = np.random.permutation(len(filenames)).tolist()
        with MDSWriter(out=os.path.join(args.out_root, split),
                       columns={'i': 'int', 'x': 'jpeg', 'y': 'int'},
                       compression=args.compression or None,
                       hashes=get_list_arg(args.hashes), size_limit=args.size_limit,
                       progress_bar=bool(args.progress_bar)) as writer:
            for i in _progress(order, bool(args.progress_bar), bool(args.leave)):
                if args.validate:
                    with Image.open(filenames[i]) as image:
                        image.verify()
                with open(filenames[i], 'rb') as f:
                    writer.write({'i': i, 'x': f.read(), 'y': classes[i]})


if __name__ == '__main__':
    main(parse_args())
