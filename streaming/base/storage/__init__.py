"""The reference's ``streaming.base.storage``: uploaders and downloaders by scheme."""

from streaming.base.storage.download import (
    AlipanDownloader,
    AzureDataLakeDownloader,
    AzureDownloader,
    CloudDownloader,
    DatabricksUnityCatalogDownloader,
    DBFSDownloader,
    GCSDownloader,
    HFDownloader,
    LocalDownloader,
    OCIDownloader,
    S3Downloader,
    SFTPDownloader,
)
from streaming.base.storage.upload import (
    AzureDataLakeUploader,
    AzureUploader,
    CloudUploader,
    GCSUploader,
    HFUploader,
    LocalUploader,
    OCIUploader,
    S3Uploader,
)

__all__ = ['AlipanDownloader', 'AzureDataLakeDownloader', 'AzureDataLakeUploader',
           'AzureDownloader', 'AzureUploader', 'CloudDownloader', 'CloudUploader',
           'DBFSDownloader', 'DatabricksUnityCatalogDownloader', 'GCSDownloader', 'GCSUploader',
           'HFDownloader', 'HFUploader', 'LocalDownloader', 'LocalUploader', 'OCIDownloader',
           'OCIUploader', 'S3Downloader', 'S3Uploader', 'SFTPDownloader']
