"""Kubernetes manifests for a deploy plan: a Deployment (or a LeaderWorkerSet) and a Service per role.

A role whose worker fits one host is a Deployment of `count` pods; one that spans hosts is a
LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) of `count` groups of `nodes` pods, the leader
running the launch command and the workers its follower form, with the leader's address and
each pod's index from the variables LeaderWorkerSet sets (LWS_LEADER_ADDRESS,
LWS_WORKER_INDEX). Every pod asks for its GPUs, selects nodes by the GPU feature discovery
product label, waits on the server's health endpoint, mounts a model-cache volume and
/dev/shm, and reads HF_TOKEN from a secret. The front (P/D proxy or router) comes from the
engine's launch module.
"""

from __future__ import annotations

import shlex

import yaml

from servesim.deploy.plan import FRONT_PORT, DeployPlan, RolePlan, service_name

MODEL_CACHE_CLAIM = "model-cache"        # a PersistentVolumeClaim the user creates (README)
HF_TOKEN_SECRET = "hf-token"             # a Secret with key "token"
CACHE_MOUNT = "/root/.cache/huggingface"
FILES_MOUNT = "/servesim"


def manifests(plan: DeployPlan) -> str:
    """Every object, as one multi-document YAML."""
    docs = []
    for role in plan.roles:
        if role.command.files:
            docs.append(_config_map(_name(plan, role), role.command.files))
        docs.append(_workload(plan, role))
        docs.append(_service(_name(plan, role), role.launch.port, _name(plan, role)))
    if plan.front is not None:
        name = service_name(plan.served_model_name, "front")
        if plan.front.files:
            docs.append(_config_map(name, plan.front.files))
        container = _container(name, plan.front.image, plan.front.argv, FRONT_PORT, plan.front.health_path, gpus=0,
                               files=bool(plan.front.files))
        docs.append(_deployment(name, 1, container, gpu_product=None, files=name if plan.front.files else None))
        docs.append(_service(name, FRONT_PORT, name))
    return yaml.safe_dump_all(docs, sort_keys=False, width=1000)


def _name(plan: DeployPlan, role: RolePlan) -> str:
    return service_name(plan.served_model_name, role.spec.name)


def _workload(plan: DeployPlan, role: RolePlan) -> dict:
    name = _name(plan, role)
    launch, command = role.launch, role.command
    gpus_per_pod = min(launch.gpus, launch.gpus_per_host)
    product = role.spec.deployment.gpu.device_name.replace(" ", "-")
    files = name if command.files else None
    leader = _container(name, command.image, command.argv, launch.port, command.health_path, gpus_per_pod,
                        command.env, files=bool(files))
    if command.follower_argv is None:
        return _deployment(name, role.spec.count, leader, product, files)
    follower = _container(name, command.image, command.follower_argv, None, None, gpus_per_pod, command.env,
                          files=bool(files))
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": role.spec.count,
            "leaderWorkerTemplate": {
                "size": launch.nodes,
                "leaderTemplate": _pod_template(name, leader, product, "leader", files),
                "workerTemplate": _pod_template(name, follower, product, "worker", files),
            },
        },
    }


def _deployment(name: str, replicas: int, container: dict, gpu_product: str | None,
                files: str | None = None) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name, "servesim.part": "leader"}},
                 "template": _pod_template(name, container, gpu_product, "leader", files)},
    }


def _pod_template(name: str, container: dict, gpu_product: str | None, part: str, files: str | None) -> dict:
    volumes = [{"name": "model-cache", "persistentVolumeClaim": {"claimName": MODEL_CACHE_CLAIM}},
               {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    if files is not None:
        volumes.append({"name": "servesim-files", "configMap": {"name": f"{files}-files"}})
    spec: dict = {"containers": [container], "volumes": volumes}
    if gpu_product is not None:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": gpu_product}
    # The Service selects the leaders only: the other hosts of a wide worker serve no API.
    return {"metadata": {"labels": {"app": name, "servesim.part": part}}, "spec": spec}


def _container(name: str, image: str, argv, port: int | None, health: str | None, gpus: int,
               env: tuple = (), files: bool = False) -> dict:
    # A shell runs the command so $LEADER_ADDRESS, $NODE_RANK and $START_RANK expand inside the pod.
    script = "; ".join([
        "export LEADER_ADDRESS=${LWS_LEADER_ADDRESS:-localhost}",
        "export NODE_RANK=${LWS_WORKER_INDEX:-0}",
        "export START_RANK=$((NODE_RANK * ${RANKS_PER_HOST:-1}))",
        "exec " + " ".join(arg if arg.startswith("$") else shlex.quote(arg) for arg in argv),
    ])
    container: dict = {
        "name": "server", "image": image, "command": ["/bin/bash", "-c", script],
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": "token",
                                                                     "optional": True}}},
                *({"name": key, "value": value} for key, value in env)],
        "volumeMounts": [{"name": "model-cache", "mountPath": CACHE_MOUNT}, {"name": "shm", "mountPath": "/dev/shm"}],
    }
    if files:
        # The command's files (its LLM-API YAML) from the ConfigMap, in the folder it runs in.
        container["volumeMounts"].append({"name": "servesim-files", "mountPath": FILES_MOUNT})
        container["workingDir"] = FILES_MOUNT
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    if port is not None:
        container["ports"] = [{"containerPort": port, "name": "http"}]
        container["readinessProbe"] = {"httpGet": {"path": health, "port": port}, "periodSeconds": 10,
                                       "failureThreshold": 360}   # weights load for minutes
    return container


def _config_map(name: str, files) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-files"},
            "data": {file_name: text for file_name, text in files}}


def _service(name: str, port: int, app: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": app, "servesim.part": "leader"}, "ports": [{"port": port, "targetPort": port, "name": "http"}]}}
