"""``serve run``'s arguments to the server's settings and Serve's deployment options, without
a cluster (the cluster itself: test_ray_serve.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

pytest.importorskip("ray.serve")

from reward_server.ray_serve import parse_args  # noqa: E402
from reward_server.ray_serve.options import WORKLOADS  # noqa: E402


def test_server_settings_by_field_name_and_serve_options_by_ray_prefix():
    server, options = parse_args({"math_timeout_s": "2.5", "sandbox-pool-size": "3",
                                  "ray_max_replicas": "8", "ray_workload": "math"})
    assert (server.math_timeout_s, server.sandbox_pool_size) == (2.5, 3)
    deployment = options.deployment_options()
    assert deployment["autoscaling_config"]["max_replicas"] == 8
    assert deployment["autoscaling_config"]["target_ongoing_requests"] == 2
    assert "max_replicas_per_node" not in deployment  # math replicas may share a node


def test_code_workload_keeps_one_replica_per_node_and_fields_override_it():
    _, options = parse_args({"ray_upscale_delay_s": "5"})
    deployment = options.deployment_options()
    code = WORKLOADS["code"]
    assert deployment["max_replicas_per_node"] == 1
    assert deployment["max_ongoing_requests"] == code.max_ongoing_requests
    assert deployment["autoscaling_config"]["upscale_delay_s"] == 5
    assert deployment["autoscaling_config"]["downscale_delay_s"] == code.downscale_delay_s
    _, uncapped = parse_args({"ray_max_replicas_per_node": "0"})
    assert "max_replicas_per_node" not in uncapped.deployment_options()


def test_math_workers_follow_the_replicas_cpus_not_the_nodes_cores():
    server, _ = parse_args({"ray_replica_cpus": "3"})
    assert server.math_workers == 3
    server, _ = parse_args({"ray_replica_cpus": "0.5"})
    assert server.math_workers == 1
    server, _ = parse_args({"ray_replica_cpus": "3", "math_workers": "2"})
    assert server.math_workers == 2


def test_resources_as_json_on_the_command_line():
    _, options = parse_args({"ray_resources": '{"docker": 1}'})
    assert options.deployment_options()["ray_actor_options"]["resources"] == {"docker": 1.0}


@pytest.mark.parametrize("args, named", [
    ({"math_timout_s": "2"}, "math_timout_s"),
    ({"workers": "2"}, "workers"),
])
def test_refused_arguments_name_themselves(args, named):
    with pytest.raises(ValueError, match=named):
        parse_args(args)


def test_unknown_serve_option_is_refused():
    with pytest.raises(ValidationError, match="max_replica"):
        parse_args({"ray_max_replica": "2"})
    with pytest.raises(ValidationError, match="target_ongoing_requests"):
        parse_args({"ray_target_ongoing_requests": "0"})
