"""The KubeRay manifests in deploy/: they parse, and they keep the promises deploy/README.md makes.

No Kubernetes here: the checks read the YAML. Each promise is one that, broken, fails
only on a real cluster and late: a node without the token, a node without the shared
volume, a search writing to a node-local path.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
MOUNT = "/mnt/tunekit"
MANIFESTS = ("rayjob.yaml", "raycluster.yaml")


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc is not None]


def cluster_spec(name: str) -> dict[str, Any]:
    (ray,) = [doc for doc in documents(name) if doc["apiVersion"] == "ray.io/v1"]
    return ray["spec"]["rayClusterSpec"] if ray["kind"] == "RayJob" else ray["spec"]


def pod_specs(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    spec = cluster_spec(name)
    yield "head", spec["headGroupSpec"]["template"]["spec"]
    for group in spec["workerGroupSpecs"]:
        yield group["groupName"], group["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_parses_into_kubernetes_objects(name: str) -> None:
    docs = documents(name)
    assert all({"apiVersion", "kind", "metadata", "spec"} <= doc.keys() for doc in docs)
    kinds = [doc["kind"] for doc in docs]
    assert kinds == ["PersistentVolumeClaim", "RayJob" if name == "rayjob.yaml" else "RayCluster"]


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_ray_container_gets_token_auth_from_a_secret(name: str) -> None:
    containers = [c for _, pod in pod_specs(name) for c in pod["containers"]]
    ray = next(doc for doc in documents(name) if doc["apiVersion"] == "ray.io/v1")
    if ray["kind"] == "RayJob":  # the submitter calls the dashboard: it needs the token too
        containers += ray["spec"]["submitterPodTemplate"]["spec"]["containers"]
    for container in containers:
        env = env_of(container)
        assert env["RAY_AUTH_MODE"] == "token", container["name"]
        assert env["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "tunekit-ray-token", "key": "auth_token"}}
    # No literal secret anywhere in the file.
    text = (DEPLOY / name).read_text()
    assert "auth_token:" not in text.replace("key: auth_token", "")


@pytest.mark.parametrize("name", MANIFESTS)
def test_shared_volume_is_read_write_many_and_mounted_at_the_same_path_on_every_node(name: str) -> None:
    (claim,) = [doc for doc in documents(name) if doc["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for group, pod in pod_specs(name):
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", [])]
        shared = [m for m in mounts if volumes[m["name"]].get("persistentVolumeClaim")]
        assert [(m["mountPath"], volumes[m["name"]]["persistentVolumeClaim"]["claimName"]) for m in shared] == [
            (MOUNT, claim["metadata"]["name"])
        ], group


@pytest.mark.parametrize("name", MANIFESTS)
def test_gpu_worker_group_asks_for_gpus_and_versions_match_the_image(name: str) -> None:
    spec = cluster_spec(name)
    assert spec["rayVersion"] == "2.60.0"
    (gpu,) = spec["workerGroupSpecs"]
    (container,) = gpu["template"]["spec"]["containers"]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"rayproject/ray:{spec['rayVersion']}-py311-gpu" in dockerfile
    constraints = (REPO / ".ci" / "constraints.txt").read_text().splitlines()
    assert f"ray=={spec['rayVersion']}" in constraints


def test_rayjob_runs_the_default_search_on_the_shared_volume() -> None:
    (job,) = [doc for doc in documents("rayjob.yaml") if doc["kind"] == "RayJob"]
    commands = [shlex.split(part) for part in job["spec"]["entrypoint"].split("&&")]
    assert commands == [
        ["tunekit", "doctor", "--storage", f"{MOUNT}/results"],
        ["tunekit", "run", "search_spaces/digits_mlp.yaml", "--storage", f"{MOUNT}/results"],
    ]
    assert (REPO / "search_spaces" / "digits_mlp.yaml").is_file()
    env = env_of(cluster_spec("rayjob.yaml")["headGroupSpec"]["template"]["spec"]["containers"][0])
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{MOUNT}/mlflow.db"


def test_dockerfile_installs_with_the_constraints_and_copies_what_the_job_needs() -> None:
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    installs = [line for line in lines if "pip install" in line]
    assert installs and all("-c .ci/constraints.txt" in line for line in installs)
    for path in ("tunekit", "trainables", "search_spaces", "pyproject.toml", ".ci/constraints.txt"):
        assert any(line.startswith("COPY") and path in line for line in lines), path


BUCKET_JOB = "rayjob-bucket.yaml"
BUCKET = "s3://tunekit-experiments/results"


def test_the_bucket_job_has_no_shared_volume_and_every_ray_node_its_bucket_credentials_from_a_secret() -> None:
    docs = documents(BUCKET_JOB)
    assert [doc["kind"] for doc in docs] == ["RayJob"]  # no PersistentVolumeClaim: no ReadWriteMany needed
    for group, pod in pod_specs(BUCKET_JOB):
        assert not [v for v in pod.get("volumes", []) if "persistentVolumeClaim" in v], group
        for container in pod["containers"]:
            env = env_of(container)
            assert env["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "tunekit-ray-token", "key": "auth_token"}}
            assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "tunekit-bucket", "key": "access_key_id"}}
            assert env["AWS_SECRET_ACCESS_KEY"] == {
                "secretKeyRef": {"name": "tunekit-bucket", "key": "secret_access_key"}
            }
            assert not str(env["MLFLOW_TRACKING_URI"]).startswith("sqlite:"), group  # a file needs a shared volume
    assert cluster_spec(BUCKET_JOB)["rayVersion"] == cluster_spec("rayjob.yaml")["rayVersion"]


def test_the_bucket_job_checks_the_bucket_then_resumes_its_experiment_or_runs_it() -> None:
    (job,) = documents(BUCKET_JOB)
    entrypoint = job["spec"]["entrypoint"]
    doctor, rest = entrypoint.split("&&")
    assert shlex.split(doctor) == ["tunekit", "doctor", "--storage", BUCKET]
    resume, run = rest.strip().strip("()").split("||")
    assert shlex.split(resume) == ["tunekit", "resume", f"{BUCKET}/digits-k8s"]
    assert shlex.split(run) == [
        "tunekit",
        "run",
        "search_spaces/digits_mlp.yaml",
        "--storage",
        BUCKET,
        "--name",
        "digits-k8s",
    ]
    assert job["spec"]["backoffLimit"] >= 1  # a retry resumes: one driver at a time by the lease
