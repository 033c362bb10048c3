"""Process memory settings for streaming jobs."""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["reuse_freed_memory"]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: the largest mmap threshold glibc accepts on 64-bit systems
_MMAP_THRESHOLD_MAX = 32 << 20
_TRIM_THRESHOLD = 1 << 30


def reuse_freed_memory() -> bool:
    """Keep the memory this process frees for its next allocations (glibc only; elsewhere
    nothing changes). Returns whether the setting took.

    glibc serves each large array from a fresh mapping and returns it to the system when it is
    freed, so a job that hashes shard after shard faults the same pages in again for every
    shard, a quarter of its CPU time on the DSIR pool. Raising the mapping and trim thresholds
    keeps freed arrays in the heap for the next shard. Worker processes forked afterwards
    inherit it. The cost: the process keeps its peak heap until it exits, which suits a
    command that runs one job and ends; it is not set by the library on import."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # both together: setting one alone turns off glibc's dynamic threshold and faults more
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
