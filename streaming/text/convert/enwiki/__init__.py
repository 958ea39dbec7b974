"""Converters of the English Wikipedia BERT pre-training data."""
