"""Benchmarks, each printing its figures next to baselines measured in the same run."""
