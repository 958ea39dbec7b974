"""English Wikipedia BERT pre-training data as MDS shards."""
