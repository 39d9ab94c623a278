"""Bad inputs end in one clean sentence (tests/support/bad_input_corpus.py), and the limits behind them hold.

Each corpus case runs the CLI's `main()` in this process (a SIGALRM time bound stands in
for a hang) and must exit 2 with one `error:` line naming its cause, no traceback, and
nothing written; killing a sweep must leave no worker process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bad_input_corpus import (API_CASES, CASES, MODEL, SAYS, TRACE, base_config, cfg_text, judge, jsonl,
                               materialize, run_in_process, snapshot, expand)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clean_sentence(case, tmp_path, capsys):
    materialize(case, tmp_path)
    before = snapshot(tmp_path)
    rc, stderr = run_in_process(expand(case.args, tmp_path), tmp_path, capsys)
    verdict, detail = judge(case, tmp_path, before, rc, stderr)
    assert verdict == "clean", f"{verdict}: {detail}"
    assert "--set" not in stderr or "--set" in case.args, stderr
    if case.expect == "error":
        assert SAYS[case.id] in stderr, stderr


def test_every_refusal_says_what_it_is_about():
    assert sorted(SAYS) == sorted(c.id for c in CASES if c.expect == "error")


@pytest.mark.parametrize("name", list(API_CASES))
def test_python_api_rejects_wrong_argument_types_in_its_own_terms(name, tmp_path, monkeypatch):
    import servesim
    from servesim.errors import ServesimError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.jsonl").write_text(TRACE)
    kwargs = {"config": base_config(), **API_CASES[name]}
    with pytest.raises(ServesimError) as err:
        servesim.simulate(**kwargs)
    message = str(err.value)
    assert "--set" not in message and "\n" not in message, message
    assert list(tmp_path.iterdir()) == [tmp_path / "trace.jsonl"]

# --------------------------------------------------------------------------- processes


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killed_sweep_leaves_no_worker_alive(tmp_path, how):
    """The coordinator killed mid-sweep (SIGKILL cannot be caught): its pool's workers end within seconds."""
    import time

    import yaml

    from tests.support.runs import sweep_base

    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(sweep_base(20000)))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"parameters": {"seed": list(range(8))}}))
    proc = subprocess.Popen([sys.executable, "-m", "servesim", "sweep", str(base), "--space", str(space),
                             "--out", str(tmp_path / "out"), "--workers", "2", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            # Two pool workers (the resource tracker is a child too), and a trial under way.
            workers = _children(proc.pid)
            if len(workers) >= 3 and (tmp_path / "out" / "trials.sqlite").exists():
                break
            time.sleep(0.1)
        assert proc.poll() is None and len(workers) >= 3, "the sweep ended before its workers were seen"
        proc.send_signal(how)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived the killed sweep"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# --------------------------------------------------------------------------- boundaries, by hand


def test_out_replaces_only_its_own_folder_and_cleans_dead_runs_leftovers(tmp_path, capsys):
    (tmp_path / "trace.jsonl").write_text(TRACE)
    (tmp_path / "c.yaml").write_text(cfg_text())
    out = tmp_path / "out"
    assert run_in_process(["run", "c.yaml", "-q", "--out", "out"], tmp_path, capsys)[0] == 0
    assert (out / ".servesim-output").is_file()
    (out / "timeline_old.png").write_text("stale")
    # A dead run's staging folder (pid 2**22 + 1 is above Linux's pid_max default) and a user's look-alike.
    dead = tmp_path / f".out.servesim-staging-{2**22 + 1}-abc"
    dead.mkdir()
    (dead / ".servesim-output").write_text("")
    mine = tmp_path / ".out.servesim-staging-1-mine"
    mine.mkdir()
    assert run_in_process(["run", "c.yaml", "-q", "--out", "out"], tmp_path, capsys)[0] == 0
    assert not (out / "timeline_old.png").exists() and (out / "summary.json").is_file()
    assert not dead.exists() and mine.is_dir()   # no marker: not servesim's to remove
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.servesim-staging-1-mine", "c.yaml", "out",
                                                          "trace.jsonl"]


def test_out_accepts_a_folder_written_before_the_marker_but_never_the_current_one(tmp_path, capsys):
    (tmp_path / "trace.jsonl").write_text(TRACE)
    (tmp_path / "c.yaml").write_text(cfg_text())
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("summary.json", "requests.csv", "ttft_cdf.png", "timeline_aggregated-0.png"):
        (legacy / name).write_text("old")
    assert run_in_process(["run", "c.yaml", "-q", "--out", "legacy"], tmp_path, capsys)[0] == 0
    assert (legacy / ".servesim-output").is_file() and not (legacy / "ttft_cdf.png").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "c.yaml").write_text(cfg_text(trace=str(tmp_path / "trace.jsonl")))
    rc, err = run_in_process(["run", "c.yaml", "-q", "--out", "."], empty, capsys)
    assert rc == 2 and "is the current folder" in err
    rc, err = run_in_process(["run", str(empty / "c.yaml"), "-q", "--out", str(tmp_path)], empty, capsys)
    assert rc == 2 and "is the current folder or holds it" in err


def test_python_api_takes_overrides_as_pairs_or_a_dict(tmp_path, monkeypatch):
    import servesim

    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.jsonl").write_text(TRACE)
    pairs = servesim.simulate(base_config(), overrides=[("seed", 3)]).summary
    mapping = servesim.simulate(base_config(), overrides={"seed": 3}).summary
    assert {k: v for k, v in pairs.items() if k != "wall_time_ms"} == \
        {k: v for k, v in mapping.items() if k != "wall_time_ms"}


def test_time_and_length_limits_hold_their_boundaries():
    from servesim import limits
    from servesim.errors import ServesimError

    limits.check_time_ms(limits.MAX_TIME_MS, "t")           # 2**62 ns exactly: held
    for bad in (limits.MAX_TIME_MS * (1 + 1e-15), float("inf"), float("nan"), -1, 10**400):
        with pytest.raises(ServesimError, match="2\\*\\*62 ns"):
            limits.check_time_ms(bad, "t")
    limits.check_tokens(limits.MAX_REQUEST_TOKENS, "n")
    with pytest.raises(ServesimError, match="100,000,000 tokens"):
        limits.check_tokens(limits.MAX_REQUEST_TOKENS + 1, "n")


def test_epoch_timestamps_fit_unscaled_but_not_scaled_up(tmp_path, monkeypatch):
    """1.7e12 ms = 1.7e18 ns fits under 2**62 ≈ 4.61e18 ns; times 3 it is 5.1e18 ns and does not."""
    import servesim
    from servesim.errors import ServesimError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.jsonl").write_text(jsonl({"timestamp": 1.7e12, "input_length": 5, "output_length": 2},
                                                {"timestamp": 1.7e12 + 10, "input_length": 5, "output_length": 2}))
    result = servesim.simulate(base_config())
    assert result.summary["completed"] == 2
    with pytest.raises(ServesimError, match="time_scale 3"):
        servesim.simulate(base_config(workload__client={"mode": "open_loop", "time_scale": 3.0}))


def test_sweep_space_sizes_hold_their_boundaries():
    from servesim.errors import ServesimError
    from servesim.sweep.space import parse_space

    parse_space({"parameters": {"seed": {"min": 1, "max": 10_000, "step": 1}}})           # 10,000 values
    with pytest.raises(ServesimError, match="10,001 values"):
        parse_space({"parameters": {"seed": {"min": 0, "max": 10_000, "step": 1}}})
    parse_space({"parameters": {"a.x": list(range(100)), "b.x": list(range(1000))}})     # 100,000 combinations
    with pytest.raises(ServesimError, match="100,100 combinations"):
        parse_space({"parameters": {"a.x": list(range(100)), "b.x": list(range(1001))}})


def test_model_sizes_hold_their_boundaries():
    from servesim.models.architecture import Architecture, ModelConfigError

    assert Architecture.from_hf("m", {**MODEL, "num_hidden_layers": 10_000}).layers == 10_000
    with pytest.raises(ModelConfigError, match="num_hidden_layers must be between 1 and 10,000, got 10,001"):
        Architecture.from_hf("m", {**MODEL, "num_hidden_layers": 10_001})
    with pytest.raises(ModelConfigError, match="hidden_size must be an integer, got 256.0"):
        Architecture.from_hf("m", {**MODEL, "hidden_size": 256.0})
    with pytest.raises(ModelConfigError, match="not a multiple of num_key_value_heads 3"):
        Architecture.from_hf("m", {**MODEL, "num_key_value_heads": 3})


def test_a_trace_past_the_request_limit_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    import servesim
    from servesim import limits
    from servesim.errors import ServesimError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(limits, "MAX_REQUESTS", 2)
    (tmp_path / "trace.jsonl").write_text(TRACE)           # 3 requests
    with pytest.raises(ServesimError, match="holds more than 2 requests"):
        servesim.simulate(base_config())
    assert servesim.simulate(base_config(workload__max_requests=2)).summary["completed"] == 2


def test_the_shared_prefix_counts_towards_a_prompt_limit():
    # Every synthetic prompt is prefix_length + input_length tokens: 60M + 50M = 110M > the
    # 100,000,000-token limit although each part alone is under it; a 10**12 prefix alone is refused too.
    from servesim.config import load_config
    from servesim.errors import ServesimError
    from servesim.limits import check_config

    def cfg(prefix, length):
        return load_config({"workload": {"synthetic": {"num_requests": 1, "input_length": length,
                                                       "output_length": 1, "prefix_length": prefix}}}).config

    check_config(cfg(40_000_000, 50_000_000), "c")   # 90M: held
    with pytest.raises(ServesimError, match="input_length is 110,000,000 tokens"):
        check_config(cfg(60_000_000, 50_000_000), "c")
    with pytest.raises(ServesimError, match="prefix_length is 1,000,000,000,000 tokens"):
        check_config(cfg(10**12, 1), "c")


# --------------------------------------------------------------------------- servesim validate

from tests.support.validate_cases import VALIDATE_CASES, VALIDATE_SAYS  # noqa: E402


@pytest.mark.parametrize("case", VALIDATE_CASES, ids=[c.id for c in VALIDATE_CASES])
def test_bad_validate_input_is_one_clean_sentence(case, tmp_path, capsys):
    materialize(case, tmp_path)
    before = snapshot(tmp_path)
    rc, stderr = run_in_process(expand(case.args, tmp_path), tmp_path, capsys)
    verdict, detail = judge(case, tmp_path, before, rc, stderr)
    assert verdict == "clean", f"{verdict}: {detail}"
    assert VALIDATE_SAYS[case.id] in stderr, stderr
