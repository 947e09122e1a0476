"""The read side: datasets, per-process handles, samplers."""
