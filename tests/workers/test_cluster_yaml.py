"""cluster.yaml is a valid Ray cluster-launcher config with the node types TuneFarm needs."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_yaml_is_a_valid_launcher_config() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    from workers.runner_pool import ARM_RESOURCE, CPU_RESOURCE

    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(prepare_config(raw))  # raises on a schema error
    types = raw["available_node_types"]
    assert raw["head_node_type"] == "head" and {"head", "cpu", "gpu", "arm"} <= set(types)
    assert types["cpu"]["resources"] == {CPU_RESOURCE: 1}
    assert types["arm"]["resources"] == {ARM_RESOURCE: 1}
    assert CPU_RESOURCE not in types["head"]["resources"]
    setup = " ".join(raw["setup_commands"])
    assert "pip install" in setup and "tunefarm" in setup
