"""cluster.yaml is a valid Ray cluster-launcher config with the node types TuneFarm needs."""

from __future__ import annotations

from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_yaml_is_a_valid_launcher_config() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    from workers.slots import ARM_RESOURCE, CPU_RESOURCE

    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(prepare_config(raw))  # raises on a schema error
    types = raw["available_node_types"]
    assert raw["head_node_type"] == "head" and {"head", "cpu", "gpu", "arm"} <= set(types)
    assert types["cpu"]["resources"] == {CPU_RESOURCE: 1}
    assert types["arm"]["resources"] == {ARM_RESOURCE: 1}
    assert CPU_RESOURCE not in types["head"]["resources"]
    setup = " ".join(raw["setup_commands"])
    assert "pip install" in setup and "tunefarm" in setup
    # GPU nodes: the gpu extra (NVRTC) is installed and the node's setup fails when its GPU
    # cannot time CUDA kernels (docs/cluster.md#gpu-nodes)
    gpu_setup = " ".join(types["gpu"]["worker_setup_commands"])
    assert "[gpu]" in gpu_setup and "python -m workers.gpu" in gpu_setup
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("cuda-bindings") for d in project["optional-dependencies"]["gpu"])
