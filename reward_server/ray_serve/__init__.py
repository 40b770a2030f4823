"""The reward server as a Ray Serve application, for RL jobs that run on Ray (veRL,
OpenRLHF): replicas of the same FastAPI app spread over the cluster's nodes, autoscaled on
ongoing requests, reached by URL through Serve's proxy or by ``DeploymentHandle``
(``handle.RewardHandle``) from code on the cluster.

    serve run --name reward-server reward_server.ray_serve:app math_timeout_s=5 ray_max_replicas=8

``app`` is the builder ``serve run`` calls with those ``key=value`` arguments: any server
setting by its field name (``reward-server --help`` lists them), any ``RaySettings`` field
as ``ray_<field>``; the environment (``REWARD_SERVER_*``, ``REWARD_SERVER_RAY_*``) fills the
rest, as for ``reward-server``. docs/deploy.md ("Ray") has the defaults and why.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application

from reward_server.ray_serve.deployment import REPLICA_ROUTE, RewardServer
from reward_server.ray_serve.options import APP_NAME, RaySettings
from reward_server.settings import ServerSettings, settings_class

__all__ = ["APP_NAME", "REPLICA_ROUTE", "RaySettings", "RewardServer", "app", "application",
           "parse_args"]


def parse_args(args: dict[str, Any]) -> tuple[ServerSettings, RaySettings]:
    """``serve run``'s arguments as the server's settings and the Serve options; an unknown
    name is refused (ValueError naming it), not ignored as a typo would be."""
    args = {key.replace("-", "_"): value for key, value in args.items()}
    ray_args = {k.removeprefix("ray_"): v for k, v in args.items() if k.startswith("ray_")}
    server_args = {k: v for k, v in args.items() if not k.startswith("ray_")}
    if isinstance(server_args.get("plugins"), str):  # 'a:A,b:B' on a command line
        server_args["plugins"] = [p for p in server_args["plugins"].split(",") if p]
    cls = settings_class(server_args.get("plugins") or ServerSettings().plugins)
    unknown = sorted(set(server_args) - set(cls.model_fields))
    if unknown:
        raise ValueError(f"unknown setting {', '.join(unknown)} (server settings go by field "
                         "name, e.g. math_timeout_s=5; Serve's as ray_<field>, e.g. "
                         "ray_max_replicas=8)")
    server = cls(**server_args)
    options = RaySettings(**ray_args)
    if server.workers != 1:
        raise ValueError("workers: under Ray Serve a replica is one process; scale with "
                         "ray_max_replicas instead")
    if getattr(server, "math_workers", None) == 0:  # not the node's cores: replicas share them
        server = server.model_copy(update={"math_workers": options.math_workers()})
    return server, options


def application(server: ServerSettings, options: RaySettings) -> Application:
    """The Serve application of one deployment, ``RewardServer``, with these settings."""
    deployment = serve.deployment(RewardServer, name="RewardServer")
    return deployment.options(**options.deployment_options()).bind(server.dump_secret())


def app(args: dict[str, Any]) -> Application:
    """The builder ``serve run reward_server.ray_serve:app key=value ...`` calls."""
    return application(*parse_args(args))
