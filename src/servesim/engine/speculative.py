"""Speculative decoding: how many drafted tokens a verification pass accepts.

Each verification of a request scores its newest token plus `k` drafted ones and
keeps the accepted drafts plus one bonus token from the target model. The
acceptance model is a list of per-position acceptance rates p_1 >= p_2 >= ... >= p_k,
where p_i is the probability that draft position i is accepted (the quantity vLLM
reports as its per-position acceptance rate); a constant rate a means p_i = a^i
(each draft accepted with probability a given its predecessors were). One uniform
number u per verification gives accepted = #{i : u < p_i}, so P(accepted >= i) = p_i
exactly and the expected acceptance length is 1 + Σ p_i, which for a constant
rate is (1 − a^(k+1)) / (1 − a).

The uniform number is a hash of (root seed, request id, the request's verification
count), not a draw from a shared stream: a request's acceptances do not depend on
which other requests share its passes, so two deployments compared on one trace see
the same drafts accepted (common random numbers), and the fast and reference
engines agree whatever order they visit requests in.
"""

from __future__ import annotations

from servesim.config import SpeculativeConfig

_MASK = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijective, well-mixed 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class Speculation:
    """One worker's drafter and verifier, as far as scheduling sees them."""

    def __init__(self, cfg: SpeculativeConfig, root_seed: int) -> None:
        self.method = cfg.method
        self.num_draft_tokens = k = cfg.num_speculative_tokens
        rates = cfg.acceptance_rate
        if isinstance(rates, list):
            self.position_rates = [float(r) for r in rates]
        else:
            self.position_rates = [float(rates) ** i for i in range(1, k + 1)]
        # Thresholds on a 64-bit integer: u < p  <=>  hash < p · 2^64.
        self._thresholds = [int(p * 2.0 ** 64) for p in self.position_rates]
        self._seed = _mix64(root_seed & _MASK)
        # Totals for the summary: verifications and tokens they produced (accepted + bonus),
        # counted before a request's length limit truncates its last verification.
        self.verifications = 0
        self.tokens = 0

    def expected_acceptance_length(self) -> float:
        return 1.0 + sum(self.position_rates)

    def accepted(self, request_id: int, step: int, drafts: int) -> int:
        """Drafts accepted of the first `drafts` scored in this verification of the request."""
        u = _mix64(self._seed ^ _mix64((request_id << 24) ^ step))
        count = 0
        thresholds = self._thresholds
        while count < drafts and u < thresholds[count]:
            count += 1
        self.verifications += 1
        self.tokens += count + 1
        return count
