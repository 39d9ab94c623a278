"""The collector's delivery counts, by hand: a pass's measured deliveries are its measured
requests' first tokens and later tokens (counted in the same loop that buckets the later
tokens' gaps), warm-up requests left out, and a pass that delivers none records no delivery."""

from __future__ import annotations

from types import SimpleNamespace

from servesim.engine.passes import PassResult, SchedulerOutput
from servesim.metrics.collector import Collector


def _request(request_id: int) -> SimpleNamespace:
    return SimpleNamespace(request_id=request_id, first_token_ns=None, last_token_ns=None, finish_ns=None)


def _pass(end_ns: int, delivered: list) -> PassResult:
    done = PassResult(SchedulerOutput(), 0, 0)
    done.end_ns = end_ns
    done.delivered = list(delivered)
    done.kv_used = 3   # known ahead: the fake worker has no cache to read
    return done


def test_measured_deliveries_and_gaps_counted_by_hand():
    collector = Collector(warmup=2)
    scheduler = SimpleNamespace(waiting=[], kv=SimpleNamespace(num_usable=10))
    worker = SimpleNamespace(name="w0", role="aggregated", scheduler=scheduler, intake=[], busy_ns=0,
                             keep_pass_details=lambda: None)
    collector.register([worker])
    warm, second_warm, a, b, c = (_request(i) for i in (0, 1, 2, 3, 4))

    # First tokens: the warm-up request's is not measured, the other two are.
    collector.on_pass(worker, _pass(100, [warm, a, b]))
    # Later tokens of a and b (gap 150 each), c's first; the warm-up ones measure nothing.
    collector.on_pass(worker, _pass(250, [warm, second_warm, a, b, c]))
    # Only warm-up requests: no measured delivery, so no delivery record.
    collector.on_pass(worker, _pass(300, [warm, second_warm]))
    # One later token: c's, 150 after its first.
    collector.on_pass(worker, _pass(400, [c]))

    assert list(collector._delivery_ns) == [100, 250, 400]
    assert list(collector._delivery_n) == [2, 3, 1]
    assert collector.itl.count == 3 and collector.itl.total == 3 * 150
    assert (a.first_token_ns, a.last_token_ns, c.first_token_ns, c.last_token_ns) == (100, 250, 250, 400)
    assert warm.last_token_ns == 300 and second_warm.first_token_ns == 250
    times, counts = collector.deliveries()
    assert list(times) == [100, 250, 400] and list(counts) == [2, 3, 1]
