"""Sweeps: simulate many deployments of one workload and recommend the best (docs/sweeps.md).

- `space.py`: the space file (parameters, search, constraints, objective, SLOs), strict.
- `trials.py`: overrides, candidates (grid, seeded random), constraints, halving rungs.
- `objective.py`: per-GPU metrics, the SLO filter, rankings, the Pareto frontier.
- `store.py`: one SQLite row per trial, committed as it completes (resume).
- `executor.py`: trials as `servesim.simulate` calls, in-process, in a process pool or on Ray.
- `runner.py`: the sweep loop; `report.py`: table, trials.csv, pareto.png, best.yaml.
- `recommend.py`: a default space for `servesim recommend`.
"""
