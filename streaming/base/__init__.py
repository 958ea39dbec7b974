"""The reference's ``streaming.base`` import path, kept so existing code keeps working.

Only the writers are imported here; the torch-based names resolve on first access, as in
``streaming`` itself, so ``from streaming.base import MDSWriter`` does not import torch.
"""

from streaming import (  # noqa: F401
    CSVWriter,
    JSONWriter,
    MDSWriter,
    TSVWriter,
    XSVWriter,
    __all__,
    __getattr__,
)
