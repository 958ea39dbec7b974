"""Settings cached per environment (``storage.environ``): any change of the environment counts."""

from __future__ import annotations

import pytest

from streaming.storage import s3_light
from streaming.storage.download import DownloadConfig
from streaming.storage.environ import on_environ


def test_a_changed_variable_is_followed(monkeypatch) -> None:
    monkeypatch.setenv('STREAMING_DOWNLOAD_CONCURRENCY', '3')
    assert DownloadConfig.from_env().concurrency == 3
    monkeypatch.setenv('STREAMING_DOWNLOAD_CONCURRENCY', '5')
    assert DownloadConfig.from_env().concurrency == 5
    monkeypatch.delenv('STREAMING_DOWNLOAD_CONCURRENCY')
    assert DownloadConfig.from_env().concurrency == DownloadConfig().concurrency


def test_the_same_environment_computes_once_and_errors_are_not_kept(monkeypatch) -> None:
    calls: list[str] = []

    @on_environ
    def setting(name: str) -> int:
        import os
        calls.append(name)
        return int(os.environ[name])

    monkeypatch.setenv('STREAMING_TEST_SETTING', 'bad')
    for _ in range(2):
        with pytest.raises(ValueError):
            setting('STREAMING_TEST_SETTING')
    monkeypatch.setenv('STREAMING_TEST_SETTING', '7')
    assert [setting('STREAMING_TEST_SETTING') for _ in range(3)] == [7, 7, 7]
    assert calls == ['STREAMING_TEST_SETTING'] * 3  # Twice refused, then once for all three.


def test_light_settings_follow_the_environment_and_a_new_config_file(monkeypatch,
                                                                      tmp_path) -> None:
    for name in ('AWS_PROFILE', 'HTTP_PROXY', 'http_proxy', 'STREAMING_S3_CLIENT'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'key')
    monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'secret')
    config = tmp_path / 'config'
    monkeypatch.setenv('AWS_CONFIG_FILE', str(config))
    settings = s3_light.light_settings('http://127.0.0.1:9000')
    assert settings is not None and settings.access_key == 'key'
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'other')
    assert s3_light.light_settings('http://127.0.0.1:9000').access_key == 'other'
    config.write_text('[default]\n')  # The same environment, but boto3 would read this file.
    assert s3_light.light_settings('http://127.0.0.1:9000') is None
    config.unlink()
    monkeypatch.setenv('STREAMING_S3_CLIENT', 'boto3')
    assert s3_light.light_settings('http://127.0.0.1:9000') is None
