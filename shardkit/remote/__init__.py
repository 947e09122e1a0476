"""Datasets in object storage (the `remote` extra, on fsspec): locations and their credentials,
checked transfers with retries, and the shard cache of remote reads. Nothing outside this package
and the push/pull operations imports fsspec."""
