"""Steward's NVML agent: samples GPUs, spools sealed batches, delivers them signed.

Pure Python, no Django: it runs on GPU nodes that have no access to the server's code.
"""

__version__ = "0.1.0"
