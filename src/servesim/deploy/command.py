"""`servesim deploy CONFIG --out DIR`: the body of the command (cli.py stays thin)."""

from __future__ import annotations

import sys
from pathlib import Path

from servesim.config import parse_override
from servesim.config.loading import load_config
from servesim.deploy.plan import deploy_plan
from servesim.deploy.writer import write_deploy_folder
from servesim.metrics.output import AtomicFiles


def deploy(config: Path | None, out: Path, set_: list[str] | None, model_path: str | None,
           served_model_name: str | None) -> list[str]:
    """Write the deploy folder for a config; returns the file names written. ServesimError on bad input."""
    overrides = [(*parse_override(item)[:2], "--set " + item.split("=", 1)[0].strip()) for item in set_ or []]
    loaded = load_config(config, overrides)
    plan = deploy_plan(loaded, model_path, served_model_name)
    files = AtomicFiles()
    try:
        files.protect([config])
        names = write_deploy_folder(plan, out, files)
        files.protect([config])
        files.commit()
    except BaseException:
        files.abort()
        raise
    for role in plan.roles:
        sys.stderr.write(f"{role.spec.name}: {' '.join(role.command.argv[:3])} ... ({len(role.command.argv)} "
                         f"arguments) -> {out / ('launch_' + role.spec.name + '.sh')}\n")
    return names
