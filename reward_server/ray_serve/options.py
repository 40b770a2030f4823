"""The Serve side of the settings: replicas, autoscaling and placement, as one more settings
class (``REWARD_SERVER_RAY_<FIELD>``, or ``ray_<field>=`` among ``serve run``'s arguments),
turned into ``@serve.deployment`` options.

Autoscaling scales on ongoing requests, and a request is one client chunk (up to 512 items),
so the two workloads want different defaults (``workload``, docs/deploy.md "Ray"):

- **math** is CPU in the replica's own worker processes: a replica with one batch in flight
  already keeps its workers busy, so a second waiting batch (target 2) is the sign to add
  one; replicas start in seconds (forked workers), so scaling up reacts in 10 s, and any
  number of them may share a node.
- **code** runs in the node's Docker engine, which every replica on that node would share:
  a second replica there adds containers on the same CPUs, and load-made timeouts score 0.
  So one replica per node (code throughput grows with nodes), and a second batch queued on a
  replica (target 1) is the sign to add one on another node.

Both scale down only after minutes: an RL step leaves the reward server idle while the policy
generates, and a shorter delay would drop replicas every step and pay their cold start at
every scoring phase.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

APP_NAME = "reward-server"  # what `serve run --name` and the handle path use by default


@dataclass(frozen=True)
class Workload:
    """The defaults one kind of traffic wants; every field can be set on its own."""

    target_ongoing_requests: float
    max_ongoing_requests: int
    upscale_delay_s: float
    downscale_delay_s: float
    max_replicas_per_node: int  # 0: no cap


WORKLOADS = {
    "math": Workload(target_ongoing_requests=2, max_ongoing_requests=8, upscale_delay_s=10,
                     downscale_delay_s=300, max_replicas_per_node=0),
    "code": Workload(target_ongoing_requests=1, max_ongoing_requests=4, upscale_delay_s=30,
                     downscale_delay_s=600, max_replicas_per_node=1),
}


def _json(value: object) -> object:
    """A dict given as text (``ray_resources='{"docker": 1}'`` on serve run's command line)."""
    return json.loads(value) if isinstance(value, str) else value


class RaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REWARD_SERVER_RAY_", env_file=".env",
                                      extra="forbid")

    app_name: str = Field(APP_NAME, description="Serve application name (reward-server --ray; "
                          "serve run takes --name); the handle path finds the app by it.")
    route_prefix: str = Field("/", description="URL prefix of the app on Serve's proxy.")
    workload: Literal["math", "code"] = Field(
        "code", description="Autoscaling and placement defaults: 'code' (one replica per "
        "node: the node's engine is shared) is safe for mixed batches; 'math' for a "
        "deployment that scores no code.")
    replica_cpus: float = Field(1.0, gt=0, description="Ray CPUs each replica reserves; "
                                "math workers default to this many (math_workers 0).")
    resources: Annotated[dict[str, float], BeforeValidator(_json)] = Field(
        default_factory=dict, description="Custom Ray resources a replica needs, as JSON: "
        '{"docker": 1} keeps replicas on nodes started with --resources \'{"docker": 1}\' '
        "(those with an engine).")
    min_replicas: int = Field(1, ge=0, description="Replicas kept at no load.")
    max_replicas: int = Field(4, ge=1, description="Replicas at most.")
    initial_replicas: int | None = Field(None, ge=0, description="Replicas at start; unset: "
                                         "min_replicas.")
    target_ongoing_requests: float | None = Field(None, gt=0, description="Requests in "
                                                  "flight per replica the autoscaler aims at.")
    max_ongoing_requests: int | None = Field(None, ge=1, description="Requests one replica "
                                             "takes at once; more wait at Serve's router.")
    upscale_delay_s: float | None = Field(None, ge=0, description="Load held this long adds "
                                          "replicas.")
    downscale_delay_s: float | None = Field(None, ge=0, description="Idle this long removes "
                                            "replicas.")
    look_back_period_s: float = Field(30.0, gt=0, description="Window the ongoing requests "
                                      "are averaged over.")
    max_replicas_per_node: int | None = Field(None, ge=0, description="Replicas one node may "
                                              "hold (0: no cap); unset: the workload's.")

    def resolved(self) -> Workload:
        """The workload's defaults with every field this object sets in their place."""
        base = WORKLOADS[self.workload]
        return Workload(**{name: getattr(self, name) if getattr(self, name) is not None
                           else getattr(base, name) for name in base.__dataclass_fields__})

    def math_workers(self) -> int:
        """Math workers a replica forks when math_workers is 0: its reserved CPUs, not the
        node's cores, which other replicas share."""
        return max(1, math.floor(self.replica_cpus))

    def deployment_options(self) -> dict[str, Any]:
        """``@serve.deployment`` options. Serve places replicas with Ray's SPREAD strategy by
        default; the per-node cap keeps code replicas one per engine."""
        load = self.resolved()
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.replica_cpus, "resources": self.resources},
            "max_ongoing_requests": load.max_ongoing_requests,
            "autoscaling_config": {
                "min_replicas": self.min_replicas,
                "initial_replicas": self.initial_replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": load.target_ongoing_requests,
                "upscale_delay_s": load.upscale_delay_s,
                "downscale_delay_s": load.downscale_delay_s,
                "look_back_period_s": self.look_back_period_s,
            },
        }
        if load.max_replicas_per_node:
            options["max_replicas_per_node"] = load.max_replicas_per_node
        return options
