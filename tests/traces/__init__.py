"""Labeled trace corpus for the loop detector: looping traces and healthy hard negatives."""

from .healthy import HEALTHY_TRACES
from .loops import LOOP_TRACES
from .model import Trace

CORPUS: list[Trace] = [*LOOP_TRACES, *HEALTHY_TRACES]
"""Every trace, looping ones first."""

__all__ = ["CORPUS", "HEALTHY_TRACES", "LOOP_TRACES", "Trace"]
