"""The NVML agent that runs on GPU nodes. Imports no Django."""
