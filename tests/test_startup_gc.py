"""The collector paused for start-up and turned back on (startup_gc.py), with a fake `gc`."""

from __future__ import annotations

from servesim import startup_gc


class FakeGc:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.freezes = 0

    def isenabled(self) -> bool:
        return self.enabled

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def freeze(self) -> None:
        self.freezes += 1


def _fresh(monkeypatch, enabled: bool = True) -> FakeGc:
    fake = FakeGc(enabled)
    monkeypatch.setattr(startup_gc, "gc", fake)
    monkeypatch.setattr(startup_gc, "_paused", False)
    monkeypatch.setattr(startup_gc, "_frozen", False)
    return fake


def test_paused_then_frozen_once_and_on_again(monkeypatch):
    fake = _fresh(monkeypatch)
    startup_gc.pause()
    assert not fake.enabled
    startup_gc.resume()
    assert fake.enabled and fake.freezes == 1
    startup_gc.resume()   # nothing paused: nothing done
    startup_gc.pause()    # frozen already: a second start-up in this process is left alone
    assert fake.enabled
    startup_gc.resume()
    assert fake.freezes == 1


def test_a_collector_the_program_turned_off_stays_off(monkeypatch):
    fake = _fresh(monkeypatch, enabled=False)
    startup_gc.pause()
    startup_gc.resume()
    assert not fake.enabled and fake.freezes == 0


def test_resume_without_freezing(monkeypatch):
    fake = _fresh(monkeypatch)
    startup_gc.pause()
    startup_gc.resume(freeze=False)
    assert fake.enabled and fake.freezes == 0
    startup_gc.pause()   # not frozen yet: the next start-up may still freeze
    assert not fake.enabled
    startup_gc.resume()
    assert fake.enabled and fake.freezes == 1


def test_a_frozen_start_up_leaves_the_simulation_free_to_go(monkeypatch):
    # With the real collector: a sweep worker pauses it, and its first trial's simulation
    # freezes the start-up; that simulation (workers pointing back at it: a cycle) must still
    # be freed once the trial is over, or each worker would keep its first trial for good.
    import gc
    import weakref

    import servesim
    from servesim import run as run_module

    monkeypatch.setattr(startup_gc, "_paused", False)
    monkeypatch.setattr(startup_gc, "_frozen", False)
    built = []
    real_build = run_module.build_cluster

    def build_and_watch(*args, **kwargs):
        sim = real_build(*args, **kwargs)
        built.append(weakref.ref(sim))
        return sim

    monkeypatch.setattr(run_module, "build_cluster", build_and_watch)
    was_enabled = gc.isenabled()
    startup_gc.pause()
    try:
        servesim.simulate({"workload": {"synthetic": {"num_requests": 4, "input_length": 32,
                                                      "output_length": 4}}})
        assert startup_gc._frozen and gc.isenabled()
        gc.collect()
        assert len(built) == 1 and built[0]() is None
    finally:
        gc.unfreeze()   # give this test process its heap back
        if not was_enabled:
            gc.disable()
