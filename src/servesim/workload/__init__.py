"""Workloads: request traces, synthetic generators, and the clients that send them."""

from servesim.workload.trace import TraceRequest, load_trace

__all__ = ["TraceRequest", "load_trace"]
