"""LAION converters."""
