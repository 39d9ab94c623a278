"""The deploy folder: a launch script per role, the benchmark script, plan.json and a README.

Everything is staged and swapped in whole (metrics/output.AtomicFiles), as `servesim run
--out` does: a refused config writes nothing.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from servesim.deploy.benchmark import RESULT_FILE
from servesim.deploy.manifests import manifests
from servesim.deploy.stacks import stack_files
from servesim.deploy.plan import FRONT_PORT, DeployPlan, RolePlan
from servesim.metrics.output import AtomicFiles

_SCRIPT_HEAD = "#!/usr/bin/env bash\n# Written by servesim deploy from {source}.\nset -euo pipefail\n"


def write_deploy_files(plan: DeployPlan, out: Path, files: AtomicFiles, stack: str = "plain") -> list[str]:
    """Write the plan's files under `out` (inside a folder `files` has staged); returns their names."""
    written: dict[str, str] = dict(stack_files(plan, stack))
    for role in plan.roles:
        written[f"launch_{role.spec.name}.sh"] = _launch_script(plan, role)
        for name, text in role.command.files:
            written[name] = text
    if plan.front is not None:
        written["launch_front.sh"] = _script(plan, [_command_line(plan.front.argv)])
        for name, text in plan.front.files:
            written[name] = text
    written["k8s.yaml"] = manifests(plan)
    if plan.benchmark.argv is not None:
        written["benchmark.sh"] = _script(plan, [_command_line(plan.benchmark.argv)])
    written["plan.json"] = json.dumps(plan_json(plan), indent=2) + "\n"
    written["README.md"] = readme(plan)
    for name, text in written.items():
        path = files.path_for(out / name)
        path.write_text(text, encoding="utf-8")
        if name.endswith(".sh"):
            path.chmod(0o755)
    return list(written)


def printed_plan(plan: DeployPlan, sub: str = "") -> str:
    """What `servesim deploy --print` shows: each script under its file name."""
    where = f"{sub}/" if sub else ""
    parts = [(f"launch_{role.spec.name}.sh", _launch_script(plan, role)) for role in plan.roles]
    for role in plan.roles:
        parts += list(role.command.files)
    if plan.front is not None:
        parts.append(("launch_front.sh", _script(plan, [_command_line(plan.front.argv)])))
        parts += list(plan.front.files)
    if plan.benchmark.argv is not None:
        parts.append(("benchmark.sh", _script(plan, [_command_line(plan.benchmark.argv)])))
    return "".join(f"==> {where}{name} <==\n{text}\n" for name, text in parts)


def plan_json(plan: DeployPlan) -> dict:
    return {
        "engine": plan.run.backend.name, "engine_version": plan.run.engine_version,
        "model_path": plan.model_path, "served_model_name": plan.served_model_name,
        "roles": [{"role": r.spec.name, "replicas": r.spec.count, "gpus_per_replica": r.launch.gpus,
                   "nodes_per_replica": r.launch.nodes, "image": r.command.image, "port": r.launch.port,
                   "argv": list(r.command.argv), "env": dict(r.command.env),
                   **({"follower_argv": list(r.command.follower_argv)} if r.command.follower_argv else {})}
                  for r in plan.roles],
        "front": None if plan.front is None else {"image": plan.front.image, "argv": list(plan.front.argv)},
        "benchmark": None if plan.benchmark.argv is None else list(plan.benchmark.argv),
    }


def _launch_script(plan: DeployPlan, role: RolePlan) -> str:
    lines = [f"# {role.spec.name}: {role.spec.count} replica(s) of {role.launch.gpus} GPU(s); run this on each."]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in role.command.env]
    if role.command.follower_argv is not None:
        lines += [f"# This worker spans {role.launch.nodes} hosts: run it on each with LEADER_ADDRESS the first "
                  "one's address and NODE_RANK 0 there, 1, 2, ... on the others.",
                  "NODE_RANK=${NODE_RANK:-0}",
                  "START_RANK=$((NODE_RANK * ${RANKS_PER_HOST:-1}))",
                  'if [ "$NODE_RANK" = "0" ]; then',
                  "  " + _command_line(role.command.argv),
                  "else",
                  "  " + _command_line(role.command.follower_argv),
                  "fi"]
    else:
        lines.append(_command_line(role.command.argv))
    return _script(plan, lines)


def _script(plan: DeployPlan, lines: list[str]) -> str:
    return _SCRIPT_HEAD.format(source=plan.run.source) + "\n".join(lines) + "\n"


def _command_line(argv) -> str:
    """One flag and its value a line; $VARIABLES stay unquoted so the shell fills them in."""
    words = [arg if arg.startswith("$") else shlex.quote(arg) for arg in argv]
    lines = [words[0]]
    for word in words[1:]:
        if word.startswith("--"):
            lines.append(word)
        else:
            lines[-1] += " " + word
    return " \\\n    ".join(lines)


def readme(plan: DeployPlan) -> str:
    run = plan.run
    lines = [f"# {run.backend.label} {run.engine_version} deployment of {plan.model_path}", "",
             f"Written by `servesim deploy` from {run.source}. Each script starts one replica of its role with "
             "the settings the simulation used; `plan.json` holds the same commands.", "", "## Roles", ""]
    for role in plan.roles:
        lines.append(f"- `launch_{role.spec.name}.sh`: {role.spec.count} × {role.launch.gpus} {role.spec.deployment.gpu.name} "
                     f"GPU(s) (tp {role.launch.tp}, attention dp {role.launch.attention_dp}, ep {role.launch.ep}), "
                     f"image `{role.command.image}`, port {role.launch.port}, health check `{role.command.health_path}`")
    if run.disaggregated:
        lines += ["", f"Clients talk to a P/D proxy on port {FRONT_PORT} that sends each request to a prefill "
                  "server, then to a decode server."]
    if plan.front is not None:
        lines += ["", f"`launch_front.sh` starts the {'P/D proxy' if run.disaggregated else 'router'} on port "
                  f"{FRONT_PORT}; it names each role by its Kubernetes Service (`k8s.yaml`): on plain hosts, put "
                  "the servers' addresses in their place."]
    lines += ["", "`k8s.yaml` holds a Deployment (a LeaderWorkerSet for a worker wider than one host) and a "
              "Service per role; it expects a PersistentVolumeClaim `model-cache` and, for gated models, a "
              "Secret `hf-token` with key `token`."]
    notes = [(role.spec.name, setting, why) for role in plan.roles for setting, why in role.command.notes]
    if plan.front is not None:
        notes += [("front", setting, why) for setting, why in plan.front.notes]
    if notes:
        lines += ["", "## Settings to check", ""]
        lines += [f"- {name}, {setting}: {why}" for name, setting, why in notes]
    lines += ["", "## Settings servesim does not model", "",
              "Every other server setting is left at the engine's default (CUDA-graph sizes below the capture "
              "limit, attention backends, kernels, logging, sampling defaults)."]
    lines += ["", "## Measure it", ""]
    if plan.benchmark.argv is None:
        lines += [f"No benchmark command: {plan.benchmark.notes[0]}."]
    else:
        result = "aiperf/profile_export_aiperf.json" if plan.benchmark.argv[0] == "aiperf" else RESULT_FILE
        lines += [f"`benchmark.sh` sends the simulated workload and saves `{result}`; compare it with the "
                  "simulation:", "", "```", f"servesim validate {result} --config {run.source}", "```"]
        lines += [f"- {note}" for note in plan.benchmark.notes]
    return "\n".join(lines) + "\n"
