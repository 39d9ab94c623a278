"""Old tree against new on the bench rows, in interleaved pairs: is any row slower?

    python benchmarks/speed_pairs.py OLD_CHECKOUT --only 2a,5 [--pairs 3] [--traces DIR]

Each row runs as `servesim bench` runs it (bench.config_for, one whole `servesim run` process;
row 8 a whole `servesim recommend`), once with this checkout's servesim and once with
OLD_CHECKOUT/src first on PYTHONPATH, the order alternating between pairs (ABBA), so a machine
whose speed drifts slows both halves of a pair alike. It prints each row's new/old ratios of wall
and CPU time (below 1: faster) as the median of the pairs and their range, and whether the two
trees' requests.csv (row 8: their recommendation) are the same.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import sys
import tempfile
from pathlib import Path

from servesim import bench
from servesim.yaml_io import dump_yaml


def _with_tree(src: Path | None):
    """Run the next process with `src` first on PYTHONPATH (None: this checkout's servesim)."""
    if src is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = str(src)


def _once(row: bench.Workload, tmp: Path, tag: str, index: int) -> tuple[bench.Measurement, Path]:
    out = tmp / f"{tag}{index}"
    if row.recommend:
        workload = tmp / "workload.yaml"
        workload.write_text(dump_yaml({"workload": row.workload}))
        return bench.recommend_once(workload, out), out
    config = tmp / "config.yaml"
    config.write_text(dump_yaml(bench.config_for(row, "fixed")))
    return bench.run_once(config, out), out


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def measure_row(row: bench.Workload, old_src: Path, pairs: int) -> str:
    walls, cpus, same = [], [], True
    with tempfile.TemporaryDirectory(prefix="servesim-pairs-") as name:
        tmp = Path(name)
        for i in range(pairs):
            order = [("old", old_src), ("new", None)] if i % 2 == 0 else [("new", None), ("old", old_src)]
            got = {}
            for tag, src in order:
                _with_tree(src)
                got[tag] = _once(row, tmp, tag, i)
            _with_tree(None)
            (old, old_out), (new, new_out) = got["old"], got["new"]
            walls.append(new.wall_s / old.wall_s)
            cpus.append(new.cpu_s / old.cpu_s)
            if row.recommend:
                same &= old.recommended == new.recommended
            else:
                same &= filecmp.cmp(old_out / "requests.csv", new_out / "requests.csv", shallow=False)
    return f"| {row.key} | {pairs} | {_spread(walls)} | {_spread(cpus)} | {'yes' if same else 'NO'} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the old checkout (its src/ goes first on PYTHONPATH)")
    parser.add_argument("--only", default="", help="rows, comma-separated (default: every runnable row)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=None)
    args = parser.parse_args()
    old_src = (args.old / "src").resolve()
    if not (old_src / "servesim").is_dir():
        sys.exit(f"error: {args.old} has no src/servesim")
    rows, _ = bench.select_rows(args.only, args.traces)
    bench._byte_compile()
    print("| row | pairs | wall new/old | CPU new/old | same output |\n|---|---|---|---|---|", flush=True)
    for row in rows:
        print(measure_row(row, old_src, args.pairs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
