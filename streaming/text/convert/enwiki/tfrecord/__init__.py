"""English Wikipedia BERT pre-training data as TFRecords (the launcher only; see migrating.md)."""
