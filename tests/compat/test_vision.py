"""streaming.vision: converters run with ``python -m`` on local data, datasets read them back,
lazily loaded, torchvision optional."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tests.compat.helpers import ROOT, image_bytes, run_module, write_file
from tests.compat.oracle import run_reference_code


def _modules_after(code: str) -> set[str]:
    script = f'{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))'
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         check=True, env=env).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_domain_packages_load_lazily() -> None:
    heavy = {'torchvision', 'transformers', 'torch', 'streaming.text', 'streaming.vision',
             'streaming.multimodal'}
    assert not heavy & _modules_after('import streaming')
    loaded = _modules_after('import streaming\nstreaming.vision.StreamingCIFAR10\n'
                            'streaming.text.StreamingC4\nstreaming.multimodal')
    assert {'streaming.vision', 'streaming.text', 'streaming.multimodal'} <= loaded
    assert 'torchvision' not in loaded and 'transformers' not in loaded
    assert {'multimodal', 'text', 'vision'} <= set(dir(__import__('streaming')))


def _cifar_batches(root: Any, per_batch: int = 3) -> dict[str, list]:
    """CIFAR-10's python pickles (as the official tarball has them), small."""
    folder = root / 'cifar-10-batches-py'
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    made: dict[str, list] = {'train': [], 'val': []}
    for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()
        with open(folder / name, 'wb') as f:
            pickle.dump({'data': data, 'labels': labels, 'batch_label': name}, f)
        split = 'val' if name == 'test_batch' else 'train'
        made[split] += [(row.reshape(3, 32, 32).transpose(1, 2, 0), y)
                        for row, y in zip(data, labels)]
    return made


def test_cifar10_convert_and_read(tmp_path: Any) -> None:
    from streaming.vision import StreamingCIFAR10
    made = _cifar_batches(tmp_path / 'raw')
    out = tmp_path / 'mds'
    run_module('streaming.vision.convert.cifar10', '--in_root', str(tmp_path / 'raw'),
               '--out_root', str(out), '--progress_bar', '0', '--hashes', 'xxh64')
    for split in ('train', 'val'):
        dataset = StreamingCIFAR10(local=str(out), split=split, batch_size=2,
                                   transform=np.asarray)
        assert len(dataset) == len(made[split])
        got = sorted((int(dataset.get_item(i)[1]), dataset.get_item(i)[0].tobytes())
                     for i in range(len(dataset)))
        want = sorted((y, x.tobytes()) for x, y in made[split])
        assert got == want
    # Without a transform, images become float tensors C x H x W in [0, 1] (no torchvision).
    dataset = StreamingCIFAR10(local=str(out), split='val', batch_size=2)
    x, y = next(iter(dataset))
    assert tuple(x.shape) == (3, 32, 32) and float(x.max()) <= 1.0 and 0 <= y < 10
    assert dataset.partition_algo == 'orig' and dataset.shuffle_algo == 'py1s'


def test_reference_reads_our_cifar10(tmp_path: Any) -> None:
    made = _cifar_batches(tmp_path / 'raw', per_batch=2)
    out = tmp_path / 'mds'
    run_module('streaming.vision.convert.cifar10', '--in_root', str(tmp_path / 'raw'),
               '--out_root', str(out), '--progress_bar', '0', '--splits', 'val')
    rows = run_reference_code(f"""
import numpy as np
from streaming.base import LocalDataset
ds = LocalDataset(local={str(out / 'val')!r})
emit(sorted([int(s['y']), np.asarray(s['x']).tobytes().hex()] for s in ds))
""")[0]
    assert rows == sorted([int(y), x.tobytes().hex()] for x, y in made['val'])


def test_transforms_arguments(tmp_path: Any) -> None:
    from streaming.vision import StreamingVisionDataset
    from streaming.vision.base import StandardTransform
    run_module('streaming.vision.convert.fake_cifar10', '--out', str(tmp_path),
               '--num_train', '5', '--num_val', '3')
    both = StreamingVisionDataset(local=str(tmp_path), split='train', batch_size=1,
                                  transforms=lambda x, y: ('both', y))
    assert both.get_item(0)[0] == 'both'
    parts = StreamingVisionDataset(local=str(tmp_path), split='val', batch_size=1,
                                   transform=lambda x: x.size, target_transform=lambda y: -1)
    assert parts.get_item(0) == ((32, 32), -1)
    assert isinstance(parts.transforms, StandardTransform)
    with pytest.raises(ValueError, match='not both'):
        StreamingVisionDataset(local=str(tmp_path), split='val', batch_size=1,
                               transforms=lambda x, y: (x, y), transform=lambda x: x)


def test_imagenet_convert_and_read(tmp_path: Any) -> None:
    from streaming.vision import StreamingImageNet
    raw = tmp_path / 'raw'
    files, train_files = {}, set()
    for split, count in (('train', 3), ('val', 2)):
        for cls in ('n01', 'n02'):
            for i in range(count):
                data = image_bytes(hash((split, cls, i)) % 1000)
                write_file(raw / split / cls / f'{i}.JPEG', data)
                files[data] = 0 if cls == 'n01' else 1
                if split == 'train':
                    train_files.add(data)
    out = tmp_path / 'mds'
    run_module('streaming.vision.convert.imagenet', '--in_root', str(raw), '--out_root',
               str(out), '--progress_bar', '0', '--compression', 'zstd')
    dataset = StreamingImageNet(local=str(out), split='train', batch_size=2,
                                transform=lambda image: image)
    assert len(dataset) == 6
    from PIL import Image

    from streaming import LocalDataset
    local = LocalDataset(str(out / 'train'))
    pixels = sorted((np.asarray(local[i]['x']).tobytes(), local[i]['y'])
                    for i in range(len(local)))
    originals = sorted((np.asarray(Image.open(io.BytesIO(data))).tobytes(), y)
                       for data, y in files.items() if len(files) and data in train_files)
    assert pixels == originals and all(local[i]['x'].format == 'JPEG' for i in range(6))
    assert sorted(int(dataset.get_item(i)[1]) for i in range(6)) == [0, 0, 0, 1, 1, 1]
    bad = tmp_path / 'bad'
    write_file(bad / 'train' / 'c' / 'x.png', image_bytes(1, fmt='PNG'))
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, '-m', 'streaming.vision.convert.imagenet',
                           '--in_root', str(bad), '--out_root', str(tmp_path / 'o'),
                           '--splits', 'train', '--progress_bar', '0'],
                          capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and 'x.png' in proc.stderr


def test_ade20k_convert_and_read(tmp_path: Any) -> None:
    from streaming.vision import StreamingADE20K
    raw = tmp_path / 'raw'
    for split, sub in (('train', 'training'), ('val', 'validation')):
        for uid in ('00000001', '00000002', '00003020'):
            write_file(raw / 'images' / sub / f'ADE_{split}_{uid}.jpg', image_bytes(int(uid)))
            write_file(raw / 'annotations' / sub / f'ADE_{split}_{uid}.png',
                       image_bytes(int(uid), fmt='PNG', mode='L'))
    out = tmp_path / 'mds'
    run_module('streaming.vision.convert.ade20k', '--in_root', str(raw), '--out_root',
               str(out), '--progress_bar', '0')
    train = StreamingADE20K(local=str(out), split='train', batch_size=1,
                            joint_transform=lambda xy: (xy[0].size, xy[1].mode),
                            target_transform=str.lower)
    assert len(train) == 2  # The known-corrupt train image is skipped.
    assert train.get_item(0) == ((16, 12), 'l')
    val = StreamingADE20K(local=str(out), split='val', batch_size=1)
    assert len(val) == 3 and val.get_item(0)[1].mode == 'L'


def test_coco_convert_and_read(tmp_path: Any) -> None:
    from streaming.vision import StreamingCOCO
    raw = tmp_path / 'raw'
    for split in ('train', 'val'):
        images = [{'id': 7, 'file_name': 'a.jpg', 'height': 12, 'width': 16},
                  {'id': 9, 'file_name': 'b.jpg', 'height': 12, 'width': 16},
                  {'id': 11, 'file_name': 'c.jpg', 'height': 12, 'width': 16}]
        for image in images:
            write_file(raw / f'{split}2017' / image['file_name'], image_bytes(image['id']))
        annotations = [{'image_id': 7, 'bbox': [4, 3, 8, 6], 'category_id': 18},
                       {'image_id': 7, 'bbox': [0, 0, 16, 12], 'category_id': 1},
                       {'image_id': 9, 'bbox': [8, 6, 4, 3], 'category_id': 1}]
        categories = [{'id': 1, 'name': 'person'}, {'id': 18, 'name': 'dog'}]
        write_file(raw / 'annotations' / f'instances_{split}2017.json',
                   json.dumps({'images': images, 'annotations': annotations,
                               'categories': categories}).encode())
    out = tmp_path / 'mds'
    run_module('streaming.vision.convert.coco', '--in_root', str(raw), '--out_root', str(out),
               '--progress_bar', '0')
    val = StreamingCOCO(local=str(out), split='val', batch_size=1)
    assert len(val) == 2  # The image without boxes is skipped.
    by_id = {val.get_item(i)[1]: val.get_item(i) for i in range(2)}
    image, img_id, size, boxes, labels = by_id[7]
    assert image.mode == 'RGB' and size == (12, 16)
    assert np.allclose(boxes, [[0.25, 0.25, 0.75, 0.75], [0, 0, 1, 1]])
    assert labels.tolist() == [2, 1]
    flipped = StreamingCOCO(local=str(out), split='val', batch_size=1,
                            transform=lambda im, hw, b, lab: (im, hw[::-1], b * 2, lab + 1))
    assert flipped.get_item(0)[2] == (16, 12)


# torchvision cannot be imported here (not installed in our env; in the reference's env it fails
# to load beside the CPU torch) and there is no internet, so the download is exercised with a
# stand-in ``torchvision.datasets.CIFAR10``: given download=True it writes small batches in the
# official layout, as torchvision does after downloading, and serves (PIL image, label) pairs.
FAKE_TORCHVISION_DATASETS = '''
import os, pickle
import numpy as np
calls = []

class CIFAR10:
    def __init__(self, root, train=True, download=False, transform=None):
        from PIL import Image
        calls.append([root, train, download])
        folder = os.path.join(root, 'cifar-10-batches-py')
        if download and not os.path.isdir(folder):
            os.makedirs(folder)
            rng = np.random.default_rng(0)
            for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
                batch = {'data': rng.integers(0, 256, (2, 3072), dtype=np.uint8),
                         'labels': rng.integers(0, 10, 2).tolist()}
                with open(os.path.join(folder, name), 'wb') as f:
                    pickle.dump(batch, f)
        self.items = []
        for name in [f'data_batch_{i}' for i in range(1, 6)] if train else ['test_batch']:
            with open(os.path.join(folder, name), 'rb') as f:
                batch = pickle.load(f, encoding='latin1')
            self.items += [(Image.fromarray(row.reshape(3, 32, 32).transpose(1, 2, 0)), int(y))
                           for row, y in zip(batch['data'], batch['labels'])]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]
'''

# Converts with the stand-in in place, then reads both splits back: the same in both libraries.
_CONVERT_AND_READ = '''
import sys
sys.modules['torchvision.datasets'].__dict__.update(FAKE)
sys.argv = ['cifar10', '--in_root', IN_ROOT, '--out_root', OUT_ROOT, '--progress_bar', '0']
from streaming.vision.convert.cifar10 import main, parse_args
main(parse_args())
import numpy as np
from streaming.base import LocalDataset
rows = {split: sorted([int(s['y']), np.asarray(s['x']).tobytes().hex()]
                      for s in LocalDataset(local=OUT_ROOT, split=split))
        for split in ('train', 'val')}
'''


def test_cifar10_downloads_through_torchvision_as_the_reference(tmp_path: Any,
                                                                 monkeypatch: Any) -> None:
    import types
    fake: dict[str, Any] = {}
    exec(FAKE_TORCHVISION_DATASETS, fake)  # noqa: S102 - the test's own stand-in
    package = types.ModuleType('torchvision')
    datasets = types.ModuleType('torchvision.datasets')
    package.datasets = datasets  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, 'torchvision', package)
    monkeypatch.setitem(sys.modules, 'torchvision.datasets', datasets)
    ours: dict[str, Any] = {'FAKE': fake, 'IN_ROOT': str(tmp_path / 'ours-raw'),
                            'OUT_ROOT': str(tmp_path / 'ours-mds')}
    exec(_CONVERT_AND_READ, ours)  # noqa: S102
    # Downloaded into --in_root for the first split, then read from there for the second.
    assert fake['calls'] == [[str(tmp_path / 'ours-raw'), True, True]]
    assert len(ours['rows']['train']) == 10 and len(ours['rows']['val']) == 2
    theirs = run_reference_code(
        f'FAKE = {{}}\nexec({FAKE_TORCHVISION_DATASETS!r}, FAKE)\n'
        f'IN_ROOT = {str(tmp_path / "ref-raw")!r}\nOUT_ROOT = {str(tmp_path / "ref-mds")!r}\n'
        + _CONVERT_AND_READ + 'emit(rows)\nemit(FAKE["calls"])\n')
    assert theirs[0] == ours['rows']
    assert theirs[1][0] == [str(tmp_path / 'ref-raw'), True, True]


def test_cifar10_without_torchvision_says_what_to_do(tmp_path: Any) -> None:
    """torchvision is really missing from this env: the converter says what to install or
    where to put the files, and writes nothing."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, '-c', 'import torchvision'], capture_output=True,
                          env=env)
    assert proc.returncode != 0, 'torchvision is importable here: the stand-in test covers it'
    proc = subprocess.run([sys.executable, '-m', 'streaming.vision.convert.cifar10',
                           '--in_root', str(tmp_path / 'raw'), '--out_root',
                           str(tmp_path / 'mds'), '--progress_bar', '0'],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith('FileNotFoundError: CIFAR-10 batches of split')
    assert 'pip install torchvision' in message and 'cifar-10-python.tar.gz' in message
    assert not os.path.exists(tmp_path / 'mds' / 'train' / 'index.json')
