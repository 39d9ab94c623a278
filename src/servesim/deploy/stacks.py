"""`servesim deploy --stack llm-d|dynamo`: the same roles as an llm-d or a Dynamo deployment.

llm-d: values for the llm-d-modelservice Helm chart (llm-d-incubation/llm-d-modelservice, the
0.4 line used by llm-d's guides): `modelArtifacts`, `routing.proxy` (the routing sidecar that
runs P/D, connector nixlv2), and `decode` / `prefill` with `parallelism`, `replicas` and a
`vllm` container whose `modelCommand: vllmServe` makes the chart write `vllm serve` with the
model, port and parallelism itself; every other flag goes in `args`. llm-d serves vLLM here.

Dynamo: a `DynamoGraphDeployment` (nvidia.com/v1alpha1, as Dynamo 1.x's examples write it): a
Frontend and one worker service per role (`componentType: worker`, `subComponentType:
prefill|decode`), each running the engine's Dynamo worker module with the engine's own flags
(the engine's launch module says which: `Backend.dynamo_worker`).
"""

from __future__ import annotations

import yaml

from servesim.deploy.plan import DeployPlan, RolePlan
from servesim.errors import ServesimError

STACKS = ("plain", "llm-d", "dynamo")
# Flags the llm-d chart writes itself from modelArtifacts, routing and parallelism.
_CHART_WRITES = {"--host", "--port", "--served-model-name", "--tensor-parallel-size", "--data-parallel-size"}
DYNAMO_VERSION = "${DYNAMO_VERSION}"   # the Dynamo release whose runtime image bundles the engine version


def stack_files(plan: DeployPlan, stack: str) -> dict[str, str]:
    if stack == "plain":
        return {}
    if stack == "llm-d":
        return {"llm-d-values.yaml": yaml.safe_dump(llm_d_values(plan), sort_keys=False, width=1000)}
    if stack == "dynamo":
        return {"dynamo.yaml": yaml.safe_dump(dynamo_graph(plan), sort_keys=False, width=1000)}
    raise ServesimError(f"--stack must be one of {', '.join(STACKS)}, got {stack!r}")


def llm_d_values(plan: DeployPlan) -> dict:
    command = plan.run.backend.llm_d_model_command
    if command is None:
        raise ServesimError(f"--stack llm-d writes llm-d-modelservice values for vLLM servers; this config runs "
                            f"{plan.run.backend.label} (use --stack plain or dynamo)")
    roles = {role.spec.name: role for role in plan.roles}
    values: dict = {
        "multinode": any(role.launch.nodes > 1 for role in plan.roles),
        "modelArtifacts": {"uri": f"hf://{plan.model_path}", "name": plan.served_model_name,
                           "authSecretName": "hf-token"},
        "routing": {"servicePort": 8000, "proxy": {"enabled": plan.run.disaggregated, "connector": "nixlv2"}},
        "accelerator": {"type": "nvidia"},
    }
    decode = roles.get("decode") or roles["aggregated"]
    values["decode"] = _llm_d_role(decode, command)
    prefill = roles.get("prefill")
    values["prefill"] = _llm_d_role(prefill, command) if prefill is not None else {"create": False}
    return values


def _llm_d_role(role: RolePlan, command: str) -> dict:
    argv = role.command.argv[3:]   # after "vllm serve MODEL"
    args, i = [], 0
    while i < len(argv):
        word = argv[i]
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if word not in _CHART_WRITES:
            args.append(f"{word}={argv[i + 1]}" if has_value else word)
        i += 2 if has_value else 1
    gpus = min(role.launch.gpus, role.launch.gpus_per_host)
    return {
        "create": True, "replicas": role.spec.count,
        "parallelism": {"tensor": role.launch.tp, "data": role.launch.attention_dp},
        "containers": [{"name": "vllm", "image": role.command.image, "modelCommand": command, "args": args,
                        "env": [{"name": k, "value": v} for k, v in role.command.env],
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                      "requests": {"nvidia.com/gpu": str(gpus)}},
                        "mountModelVolume": True}],
    }


def dynamo_graph(plan: DeployPlan) -> dict:
    backend = plan.run.backend
    if backend.dynamo_worker is None:
        raise ServesimError(f"--stack dynamo has no worker command for {backend.label}")
    runtime = f"nvcr.io/nvidia/ai-dynamo/{backend.dynamo_runtime}-runtime:{DYNAMO_VERSION}"
    services: dict = {"Frontend": {"componentType": "frontend", "replicas": 1,
                                   "extraPodSpec": {"mainContainer": {"image": runtime}}}}
    for role in plan.roles:
        module, args = backend.dynamo_worker(role.launch, role.command)
        service: dict = {"componentType": "worker", "replicas": role.spec.count, "envFromSecret": "hf-token",
                         "resources": {"limits": {"gpu": str(role.launch.gpus)}},
                         "extraPodSpec": {"mainContainer": {"image": runtime, "command": ["python3", "-m", module],
                                                            "args": list(args)}}}
        if role.spec.name != "aggregated":
            service["subComponentType"] = role.spec.name
        if role.launch.nodes > 1:
            service["multinode"] = {"nodeCount": role.launch.nodes}
        services[f"{backend.dynamo_runtime.capitalize()}{role.spec.name.capitalize()}Worker"] = service
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": plan.served_model_name.lower().replace(".", "-").replace("_", "-")},
            "spec": {"services": services}}
