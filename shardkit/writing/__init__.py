"""The write path: plan -> sink -> journal -> manifest, and the executors that run shards."""
