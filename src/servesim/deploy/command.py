"""`servesim deploy CONFIG|SWEEP_DIR --out DIR`: the body of the command (cli.py stays thin)."""

from __future__ import annotations

import sys
from pathlib import Path

from servesim.config import parse_override
from servesim.config.loading import load_config
from servesim.deploy.plan import DeployPlan, deploy_plan
from servesim.deploy.sweeps import sweep_trial_configs
from servesim.deploy.writer import printed_plan, write_deploy_files
from servesim.errors import ServesimError
from servesim.metrics.output import AtomicFiles


def deploy(config: Path | dict | None, out: Path, set_: list[str] | None, model_path: str | None,
           served_model_name: str | None, trial: int | None = None, pareto: bool = False,
           announce: bool = True, stack: str = "plain", show: bool = False) -> list[DeployPlan]:
    """Write the deploy folder (one subfolder per trial for --pareto); ServesimError on bad input."""
    overrides = [(*parse_override(item)[:2], "--set " + item.split("=", 1)[0].strip()) for item in set_ or []]
    if isinstance(config, dict):
        sources = [("", config)]
    elif config is not None and Path(config).is_dir():
        trials = sweep_trial_configs(Path(config), trial, pareto)
        sources = [(f"trial-{tid}" if pareto else "", data) for tid, data in trials]
    else:
        if trial is not None or pareto:
            raise ServesimError("--trial and --pareto choose trials of a sweep: give its folder, not a config file")
        sources = [("", config)]
    plans = [(sub, deploy_plan(load_config(source, overrides), model_path, served_model_name))
             for sub, source in sources]
    if show:   # --print: the scripts on stdout, nothing written
        for sub, plan in plans:
            sys.stdout.write(printed_plan(plan, sub))
        return [plan for _, plan in plans]
    files = AtomicFiles()
    try:
        files.stage_folder(out)
        files.protect([] if isinstance(config, dict) else [config])
        for sub, plan in plans:
            write_deploy_files(plan, out / sub if sub else out, files, stack)
        files.commit()
    except BaseException:
        files.abort()
        raise
    for sub, plan in plans if announce else ():
        where = out / sub if sub else out
        for role in plan.roles:
            sys.stderr.write(f"{role.spec.name}: {' '.join(role.command.argv[:3])} ... -> "
                             f"{where / ('launch_' + role.spec.name + '.sh')}\n")
    return [plan for _, plan in plans]
