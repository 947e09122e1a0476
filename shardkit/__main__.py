"""python -m shardkit: the same as the shardkit command."""
from .cli import main

main(prog_name="shardkit")
