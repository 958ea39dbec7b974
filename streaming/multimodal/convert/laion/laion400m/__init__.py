"""LAION-400M: the download-and-convert pipeline (needs img2dataset outputs and pyarrow)."""
