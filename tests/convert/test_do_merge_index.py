"""``streaming.base.converters.dataframe_to_mds.do_merge_index`` merges partition outputs."""

from __future__ import annotations

import json
import os

import pytest

from streaming import LocalDataset, MDSWriter

pytest.importorskip('pyspark', reason='the reference module path needs pyspark (the spark extra)')


def test_do_merge_index_merges_partition_rows(tmp_path) -> None:
    from streaming.base.converters.dataframe_to_mds import do_merge_index
    out = str(tmp_path / 'out')
    rows = []
    for part in range(3):
        local = os.path.join(out, str(part))
        with MDSWriter(out=local, columns={'x': 'int'}) as writer:
            for i in range(4):
                writer.write({'x': part * 10 + i})
        rows.append({'mds_path_local': local, 'mds_path_remote': None})
    do_merge_index(rows, out)
    with open(os.path.join(out, 'index.json')) as f:
        assert len(json.load(f)['shards']) == 3
    assert sorted(s['x'] for s in LocalDataset(out)) == [p * 10 + i for p in range(3)
                                                         for i in range(4)]
    with pytest.raises(ValueError, match='no partitions'):
        do_merge_index([], out)
