"""Request-level serving simulation: traces, arrivals, continuous batching, KV admission
through an allocator, iteration times from cached tables, and serving metrics."""
from .traces import RequestTrace, load_trace, poisson_arrivals

__all__ = ["RequestTrace", "load_trace", "poisson_arrivals"]
