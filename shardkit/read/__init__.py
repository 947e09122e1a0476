"""The read side: datasets, the cache of open shards, samplers, streams."""
