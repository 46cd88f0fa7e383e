"""A faithful fake of the ``pynvml`` module for tests, benchmarks and the demo."""

from .device import FakeGpu
from .kernel_log import FakeKernelLog
from .loads import PeriodicLoad, RandomLoad
from .models import MODELS, GpuModel
from .nvml import FakeNvml
from .scenario import Scenario, load_scenario

__all__ = [
    "MODELS",
    "FakeGpu",
    "FakeKernelLog",
    "FakeNvml",
    "GpuModel",
    "PeriodicLoad",
    "RandomLoad",
    "Scenario",
    "load_scenario",
]
