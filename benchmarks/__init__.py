"""Benchmarks against the reference (mosaicml-streaming 0.13.0), LitData and the machine's limit.

Run ``.venv/bin/python -m benchmarks.run --help``; see README.md.
"""
