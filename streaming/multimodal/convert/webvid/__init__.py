"""WebVid: crawl the videos listed in its CSV files into MDS, and move them out of the shards."""
