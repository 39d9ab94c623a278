"""Per-request records and the summaries computed from them."""

from servesim.metrics.records import RequestRecord

__all__ = ["RequestRecord"]
