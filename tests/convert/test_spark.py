"""``dataframe_to_mds`` on PySpark in local mode: real Spark tasks write real shards."""

from __future__ import annotations

import json
import os
from decimal import Decimal

import numpy as np
import pytest

from tests.convert.spark_cases import ALL_TYPES, ALL_TYPES_COLUMNS, all_types_rows, dataframe

# Every test takes the ``spark`` fixture, which skips (or in CI fails) without pyspark. With
# ``pytest --dist loadgroup`` they all run on one xdist worker, so one SparkSession serves them.
pytestmark = pytest.mark.xdist_group('spark')


def _read(directory: str) -> list[dict]:
    from streaming import LocalDataset
    dataset = LocalDataset(directory)
    return [dataset[i] for i in range(len(dataset))]


def _same(value, expected) -> bool:
    if isinstance(value, np.ndarray):
        return value.tolist() == list(expected)
    if isinstance(value, (float, np.floating)):
        return float(value) == pytest.approx(expected, rel=1e-6)
    return value == expected


def test_mapping_and_json_compatibility(spark) -> None:
    import pyspark.sql.types as t

    from streaming.base.converters import SPARK_TO_MDS, is_json_compatible
    assert SPARK_TO_MDS[t.ByteType()] == 'uint8' and SPARK_TO_MDS[t.ShortType()] == 'uint16'
    assert SPARK_TO_MDS[t.DecimalType()] == 'str_decimal'
    assert SPARK_TO_MDS[t.ArrayType(t.DoubleType())] == 'ndarray:float64'
    assert [k for k, v in SPARK_TO_MDS.items() if v is None] == [
        t.BooleanType(), t.TimestampType(), t.TimestampNTZType(), t.DateType(),
        t.DayTimeIntervalType()]
    nested = t.StructType([t.StructField('a', t.ArrayType(t.IntegerType())),
                           t.StructField('m', t.MapType(t.StringType(), t.FloatType()))])
    assert is_json_compatible(nested) and is_json_compatible(t.NullType())
    for bad in [t.LongType(), t.BinaryType(), t.ArrayType(t.DoubleType()),
                t.MapType(t.StringType(), t.DateType())]:
        assert not is_json_compatible(bad)


def test_every_mapped_type_round_trips(spark, tmp_path) -> None:
    from streaming.base.converters import dataframe_to_mds, infer_dataframe_schema
    rows = all_types_rows(60)
    df = dataframe(spark, rows, ALL_TYPES, partitions=3)
    assert infer_dataframe_schema(df) == ALL_TYPES_COLUMNS
    out = str(tmp_path / 'out')
    result = dataframe_to_mds(df, mds_kwargs={'out': out, 'size_limit': 1 << 10,
                                              'hashes': ['sha1']})
    assert result == (out, '')
    with open(os.path.join(out, 'index.json')) as f:
        shards = json.load(f)['shards']
    parts = {s['raw_data']['basename'].split('/')[0] for s in shards}
    assert len(parts) == 3 and all(p.isdigit() for p in parts)  # One sub-dataset per task.
    assert len(shards) > 3 and {s['compression'] for s in shards} == {'zstd'}
    names = list(ALL_TYPES_COLUMNS)
    for sample, row in zip(_read(out), rows, strict=True):
        for name, expected in zip(names, row):
            assert _same(sample[name], expected), (name, sample[name], expected)
    assert isinstance(_read(out)[0]['dec'], Decimal)


@pytest.mark.parametrize('ddl', ['flag boolean', 'ts timestamp', 'ts timestamp_ntz', 'day date',
                                 'gap interval day to second', 'st struct<a:int>',
                                 'm map<string,int>', 'words array<string>', 'small tinyint'])
def test_unsupported_types_are_named(spark, ddl) -> None:
    from streaming.base.converters import infer_dataframe_schema
    df = spark.createDataFrame([], f'id int, {ddl}')
    name = ddl.split()[0]
    if name == 'small':
        assert infer_dataframe_schema(df) == {'id': 'int32', 'small': 'uint8'}
        return
    with pytest.raises(ValueError, match=f"Column '{name}' has Spark type") as info:
        infer_dataframe_schema(df)
    assert 'Supported types' in str(info.value)


def test_user_columns_are_checked(spark) -> None:
    from streaming.base.converters import infer_dataframe_schema
    df = spark.createDataFrame([], 'id int, dec decimal(5,1), img binary, '
                                   'st struct<a:int,b:array<string>>, ai array<int>')
    ok = {'id': 'int32', 'dec': 'str_decimal', 'img': 'jpeg', 'st': 'json', 'ai': 'ndarray:int32:4'}
    assert infer_dataframe_schema(df, ok) is None
    assert infer_dataframe_schema(df, {'img': 'bytes'}) is None
    cases = [({'nope': 'int32'}, "column 'nope', which the DataFrame does not have"),
             ({'id': 'int64'}, "Column 'id' has Spark type int, stored as 'int32'"),
             ({'dec': 'str'}, "stored as 'str_decimal'"),
             ({'id': 'png'}, "encoding 'png' needs a binary column"),
             ({'img': 'json'}, "cannot be stored with encoding 'json'"),
             ({'id': 'uint32'}, "encoding 'uint32' is not supported")]
    for columns, message in cases:
        with pytest.raises(ValueError, match=message):
            infer_dataframe_schema(df, columns)


def test_nested_and_array_columns_as_json(spark, tmp_path) -> None:
    from streaming.base.converters import dataframe_to_mds
    rows = [(i, {'a': i, 'tags': [f't{i}'] * (i % 3)}, {f'k{i}': i / 2},
             [f'w{j}' for j in range(i)], list(range(i + 1))) for i in range(8)]
    df = dataframe(spark, rows, 'id int, st struct<a:int,tags:array<string>>, m map<string,float>, '
                   'words array<string>, nums array<int>', partitions=2)
    columns = {'id': 'int32', 'st': 'json', 'm': 'json', 'words': 'json', 'nums': 'ndarray:int32'}
    out = str(tmp_path / 'nested')
    dataframe_to_mds(df, mds_kwargs={'out': out, 'columns': columns})
    for sample, (i, st, m, words, nums) in zip(_read(out), rows, strict=True):
        assert sample['id'] == i and sample['st'] == st and sample['m'] == m
        assert sample['words'] == words and sample['nums'].tolist() == nums


def _tokens(pdf, scale):
    for text, n in zip(pdf['text'], pdf['n']):
        yield {'text': text.upper(), 'tokens': np.arange((n + 1) * scale, dtype=np.int64)}


def _not_iterable(pdf):
    return len(pdf)


def test_udf_iterable(spark, tmp_path) -> None:
    from streaming.base.converters import dataframe_to_mds
    rows = [(f'doc {i}', i % 4) for i in range(20)]
    df = dataframe(spark, rows, 'text string, n int', partitions=3)
    columns = {'text': 'str', 'tokens': 'ndarray:int64'}
    out = str(tmp_path / 'udf')
    dataframe_to_mds(df, mds_kwargs={'out': out, 'columns': columns}, udf_iterable=_tokens,
                     udf_kwargs={'scale': 2})
    got = _read(out)
    assert [s['text'] for s in got] == [t.upper() for t, _ in rows]
    assert [s['tokens'].tolist() for s in got] == [list(range((n + 1) * 2)) for _, n in rows]
    with pytest.raises(ValueError, match=r"with udf_iterable, mds_kwargs\['columns'\] must"):
        dataframe_to_mds(df, mds_kwargs={'out': str(tmp_path / 'x')}, udf_iterable=_tokens)
    with pytest.raises(Exception, match='udf_iterable must return an iterable'):
        dataframe_to_mds(df, mds_kwargs={'out': str(tmp_path / 'y'), 'columns': columns},
                         udf_iterable=_not_iterable)


def test_out_local_and_remote(spark, tmp_path) -> None:
    from streaming.base.converters import dataframe_to_mds
    rows = all_types_rows(30)
    df = dataframe(spark, rows, ALL_TYPES, partitions=3)
    local, remote = str(tmp_path / 'scratch'), str(tmp_path / 'remote')
    columns = {'i': 'int32', 'txt': 'str', 'ai': 'ndarray:int32'}  # A subset of the columns.
    result = dataframe_to_mds(df, mds_kwargs={'out': (local, remote), 'keep_local': False,
                                              'columns': columns, 'compression': 'gz'})
    assert result == (local, remote)
    assert not os.path.exists(local)  # keep_local=False: the scratch copies are gone.
    got = _read(remote)
    assert [s['i'] for s in got] == [r[2] for r in rows]
    assert sorted(got[5]) == ['ai', 'i', 'txt']
    # Without merging, each task's sub-dataset is complete on its own and nothing is at the top.
    remote2 = str(tmp_path / 'remote2')
    dataframe_to_mds(df, merge_index=False, mds_kwargs={'out': (str(tmp_path / 's2'), remote2),
                                                        'columns': columns})
    assert not os.path.exists(os.path.join(remote2, 'index.json'))
    parts = sorted(os.listdir(remote2))
    assert len(parts) == 3
    assert sum(len(_read(os.path.join(remote2, p))) for p in parts) == len(rows)


def test_bad_calls(spark, tmp_path) -> None:
    from streaming.base.converters import dataframe_to_mds
    with pytest.raises(ValueError, match='None or empty'):
        dataframe_to_mds(spark.createDataFrame([], 'id int'), mds_kwargs={'out': str(tmp_path)})
    with pytest.raises(ValueError, match='None or empty'):
        dataframe_to_mds(None, mds_kwargs={'out': str(tmp_path)})
    df = dataframe(spark, [(1, True)], 'id int, flag boolean', partitions=1)
    with pytest.raises(ValueError, match="mds_kwargs must give 'out'"):
        dataframe_to_mds(df, mds_kwargs={'columns': {'id': 'int32'}})
    with pytest.raises(ValueError, match="Column 'flag' has Spark type boolean"):
        dataframe_to_mds(df, mds_kwargs={'out': str(tmp_path / 'b')})
    assert not os.path.exists(tmp_path / 'b')  # Nothing is written before the schema checks.
    (tmp_path / 'full').mkdir()
    (tmp_path / 'full' / 'junk').write_text('x')
    with pytest.raises(FileExistsError, match='not empty'):
        dataframe_to_mds(df, mds_kwargs={'out': str(tmp_path / 'full'), 'columns': {'id': 'int32'}})


def _partition_dirs(root: str) -> list[str]:
    with open(os.path.join(root, 'index.json')) as f:
        names = [s['raw_data']['basename'].split('/')[0] for s in json.load(f)['shards']]
    return list(dict.fromkeys(names))


@pytest.mark.oracle
def test_byte_identical_with_the_reference_and_read_both_ways(spark, tmp_path) -> None:
    """Same rows, same partitioning: the same files, byte for byte (only the task-attempt-id
    directory names differ); each library reads the other's output."""
    import subprocess

    from streaming.base.converters import SPARK_TO_MDS, dataframe_to_mds
    from tests.oracle.canon import canon_sample
    from tests.oracle.runner import reference_env, reference_python
    python = reference_python()
    rows, parts = 90, 3
    kwargs = {'size_limit': 1 << 11, 'hashes': ['sha1', 'xxh64'], 'compression': 'zstd:5'}
    ours, theirs = str(tmp_path / 'ours'), str(tmp_path / 'theirs')
    df = dataframe(spark, all_types_rows(rows), ALL_TYPES, partitions=parts)
    dataframe_to_mds(df, mds_kwargs={'out': ours, **kwargs})

    job = tmp_path / 'job.json'
    job.write_text(json.dumps({'out': theirs, 'read': ours, 'result': str(tmp_path / 'read.json'),
                               'rows': rows, 'partitions': parts, 'mds_kwargs': kwargs}))
    env = reference_env()
    script = os.path.join(os.path.dirname(__file__), 'ref_spark.py')
    # cwd: Spark's workers put it on sys.path, and this tree's streaming must not shadow theirs.
    proc = subprocess.run([python, script, str(job)], capture_output=True, text=True, env=env,
                          timeout=900, cwd=tmp_path)
    if proc.returncode != 0 and 'No module named \'pyspark\'' in proc.stderr:
        pytest.fail(f'the reference env lacks pyspark: run scripts/reference_spark.sh ({python})')
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    assert report['mapping'] == [[t.simpleString(), enc] for t, enc in SPARK_TO_MDS.items()]
    assert report['inferred'] == ALL_TYPES_COLUMNS

    our_parts, their_parts = _partition_dirs(ours), _partition_dirs(theirs)
    assert len(our_parts) == len(their_parts) == parts
    for a, b in zip(our_parts, their_parts):
        files = sorted(os.listdir(os.path.join(ours, a)))
        assert files == sorted(os.listdir(os.path.join(theirs, b))) and len(files) > 2
        for name in files:
            with open(os.path.join(ours, a, name), 'rb') as f1, \
                    open(os.path.join(theirs, b, name), 'rb') as f2:
                assert f1.read() == f2.read(), f'{a}/{name} differs from the reference {b}/{name}'
    with open(os.path.join(ours, 'index.json')) as f1, \
            open(os.path.join(theirs, 'index.json')) as f2:
        merged, expected = f1.read(), f2.read()
    for a, b in zip(our_parts, their_parts):
        expected = expected.replace(f'"{b}/', f'"{a}/')
    assert merged == expected

    with open(tmp_path / 'read.json') as f:
        their_reading_of_ours = json.load(f)
    our_reading_of_theirs = [canon_sample(s) for s in _read(theirs)]
    assert their_reading_of_ours == our_reading_of_theirs
    assert len(our_reading_of_theirs) == rows
