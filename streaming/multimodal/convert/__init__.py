"""Converters of multimodal datasets to MDS."""
