"""Benchmarks and the run generator (``bench.generator``) that writes realistic job folders."""
