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
