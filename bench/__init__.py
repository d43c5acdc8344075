"""Benchmarks and the run generator (``postmortem.generator``) that writes realistic job folders."""
