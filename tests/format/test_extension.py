"""docs/extending/format.md, run as written: a shard format added from outside the package.

The page's first code block is saved as ``textformat.py`` in a scratch directory put on
``sys.path``; the other blocks run there in order (they assert what they read back). Then the
registration is checked for what the page promises: index validation knows the new format.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Any, Iterator

import pytest

from streaming.errors import IndexFileError
from streaming.format import get_format, get_formats, unregister_format
from streaming.format.index import load_index

PAGE = os.path.join(os.path.dirname(__file__), '..', '..', 'docs', 'extending', 'format.md')


def code_blocks(language: str = 'python') -> list[str]:
    with open(PAGE, encoding='utf-8') as f:
        return re.findall(rf'```{language}\n(.*?)```', f.read(), re.S)


@pytest.fixture
def scratch(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A scratch dir holding the page's module, importable, as the working directory."""
    module, *_ = code_blocks()
    (tmp_path / 'textformat.py').write_text(module, encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield str(tmp_path)
    sys.modules.pop('textformat', None)
    if 'txt' in get_formats():
        unregister_format('txt')


def test_page_runs_as_written(scratch: str) -> None:
    blocks = code_blocks()
    assert len(blocks) == 3, 'the page has the module, the local example and the remote one'
    for block in blocks[1:]:
        exec(compile(block, PAGE, 'exec'), {'__name__': 'docs_example'})
    # The local example wrote several shards of the new format.
    index = load_index(os.path.join(scratch, 'greetings', 'index.json'))
    assert len(index['shards']) > 1
    assert {s['format'] for s in index['shards']} == {'txt'}
    assert {s['field'] for s in index['shards']} == {'line'}
    # The remote example uploaded compressed shards and dropped its staging directory.
    remote = load_index(os.path.join(scratch, 'remote-greetings', 'index.json'))
    assert all(s['zip_data'] is not None for s in remote['shards'])
    assert not os.path.exists(os.path.join(scratch, 'staging'))


def test_registration_drives_index_validation(scratch: str) -> None:
    import textformat
    shard_format = get_format('txt')
    assert shard_format.reader is textformat.TextReader
    assert shard_format.writer is textformat.TextWriter
    assert shard_format.file_keys == ('raw_data', 'zip_data')
    with textformat.TextWriter(out='data', field='line') as writer:
        writer.write({'line': 'only one'})
    path = os.path.join(scratch, 'data', 'index.json')
    with open(path) as f:
        obj = json.load(f)
    del obj['shards'][0]['field']
    with open(path, 'w') as f:
        json.dump(obj, f)
    with pytest.raises(IndexFileError, match='"field"'):
        load_index(path)
    with pytest.raises(ValueError, match='already registered'):
        textformat.register_format('txt', reader=textformat.TextReader)


def test_unknown_format_names_the_registered_ones(scratch: str) -> None:
    os.makedirs('bad')
    entry = {'format': 'nope', 'version': 2, 'samples': 1}
    with open(os.path.join('bad', 'index.json'), 'w') as f:
        json.dump({'version': 2, 'shards': [entry]}, f)
    with pytest.raises(IndexFileError, match=r"unknown shard format 'nope'.*'mds'"):
        load_index(os.path.join('bad', 'index.json'))


def test_reference_readers_table_is_a_view_of_the_registry(scratch: str) -> None:
    import textformat

    from streaming.base.format import _readers
    from streaming.format.mds import MDSReader
    assert _readers['mds'] is MDSReader and set(_readers) == set(get_formats())
    _readers['txt2'] = textformat.TextReader  # How the reference let users add a reader.
    try:
        assert get_format('txt2').reader is textformat.TextReader
        assert get_format('txt2').file_keys == ('raw_data', 'zip_data')
    finally:
        del _readers['txt2']
    assert 'txt2' not in _readers and 'txt2' not in get_formats()


def test_entry_point_registers_the_format_on_first_use(scratch: str) -> None:
    """Step 5 of the page: an installed package's entry point, in a process that never imported
    ``textformat``, is found when a dataset of that format is opened."""
    toml, = code_blocks('toml')
    assert '[project.entry-points."streaming.formats"]\ntxt = "textformat"' in toml
    import textformat
    with textformat.TextWriter(out='plugged', field='line') as writer:
        writer.write({'line': 'found through the entry point'})
    # What pip leaves for a package declaring that entry point.
    info = os.path.join(scratch, 'textformat_plugin-1.0.dist-info')
    os.makedirs(info)
    with open(os.path.join(info, 'METADATA'), 'w') as f:
        f.write('Metadata-Version: 2.1\nName: textformat-plugin\nVersion: 1.0\n')
    with open(os.path.join(info, 'entry_points.txt'), 'w') as f:
        f.write('[streaming.formats]\ntxt = textformat\n')
    code = textwrap.dedent('''
        import sys
        from streaming import LocalDataset
        assert 'textformat' not in sys.modules
        print(LocalDataset('plugged')[0]['line'])
        assert 'textformat' in sys.modules
    ''')
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([scratch, *sys.path])
    out = subprocess.run([sys.executable, '-c', code], cwd=scratch, env=env, text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'found through the entry point'
