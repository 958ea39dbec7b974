"""Helpers that drive the reference (mosaicml-streaming 0.13.0) as a black-box oracle."""
