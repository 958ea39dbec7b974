"""Every reference import path of a writer gives the public, upload-capable class."""

from __future__ import annotations

import os

import streaming
import streaming.base.format.base.writer as base_writer
import streaming.base.format.json as json_pkg
import streaming.base.format.json.writer as json_writer
import streaming.base.format.mds.writer as mds_writer
import streaming.base.format.xsv as xsv_pkg
import streaming.base.format.xsv.writer as xsv_writer
from streaming import writing


def test_writer_paths_are_the_public_classes() -> None:
    assert mds_writer.MDSWriter is streaming.MDSWriter is writing.MDSWriter
    assert json_writer.JSONWriter is json_pkg.JSONWriter is writing.JSONWriter
    for name in ('CSVWriter', 'TSVWriter', 'XSVWriter'):
        assert getattr(xsv_writer, name) is getattr(xsv_pkg, name) is getattr(writing, name)
    assert base_writer.Writer is writing.UploadingWriter
    assert base_writer.JointWriter is writing.JointWriter
    assert base_writer.SplitWriter is writing.SplitWriter


def test_deep_path_writer_uploads_to_a_remote(tmp_path) -> None:
    local, remote = str(tmp_path / 'local'), str(tmp_path / 'remote')
    with mds_writer.MDSWriter(out=(local, remote), columns={'a': 'int'}) as writer:
        writer.write({'a': 1})
    assert sorted(os.listdir(remote)) == ['index.json', 'shard.00000.mds']
    with xsv_writer.CSVWriter(out=(local + '-csv', remote + '-csv'),
                              columns={'a': 'int'}) as writer:
        writer.write({'a': 1})
    assert 'index.json' in os.listdir(remote + '-csv')
