"""Process plumbing shared by both paths: worker processes, the Ctrl-C latch, progress."""
