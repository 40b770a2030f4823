"""The sandbox service exists where the sandbox's settings section is loaded (the code
verifier declares it), and is handed to whoever runs in it. On a server without it, each
says so as before: /run_code and sessions a 404 naming the missing sandbox, reasoning_gym
items unavailable (null). No engine needed: nothing here starts a container."""

from __future__ import annotations

import pytest

from reward_server.callers import Caller
from reward_server.errors import UnknownVerifier
from reward_server.run_code.schemas import RunCodeRequest
from reward_server.run_code.service import run_code
from reward_server.run_code.session_schemas import CreateSessionRequest
from reward_server.run_code.sessions import Sessions
from reward_server.sandbox_service import SPARE_CONTAINERS, SandboxService
from reward_server.sandbox_settings import SECTION
from reward_server.scoring import Scorer
from reward_server.settings import ServerSettings, compose_settings, settings_class
from reward_server.verifiers.reasoning_gym import ReasoningGymVerifier
from reward_server.verifiers.reasoning_gym.verifier import NO_SANDBOX


def test_one_service_where_the_section_is_loaded() -> None:
    settings = settings_class()(sandbox_pool_size=3, sandbox_docker_hosts="unix:///a,unix:///b",
                                request_budget_s=8)
    service = SandboxService.of(settings)
    assert service is not None and service.settings.session_max_open == 16
    assert service.gate.slots == 6  # pool_size per engine; the spare is not a slot
    assert service.config.pool_size == 3 + SPARE_CONTAINERS
    assert service.unsplit_hold_s is None  # six slots: one is kept for items
    one = SandboxService.of(settings_class()(sandbox_pool_size=1, request_budget_s=8))
    assert one is not None and one.unsplit_hold_s == 4.0  # half the budget


async def test_without_the_section_each_says_there_is_no_sandbox() -> None:
    bare = compose_settings({})()
    assert SECTION not in bare.sections and SandboxService.of(bare) is None
    scorer = Scorer({}, bare)
    caller = Caller("tester", "tester")
    with pytest.raises(UnknownVerifier, match="/run_code runs in the code verifier's sandbox"):
        await run_code(scorer, None, RunCodeRequest(code="print(1)", language="python"), caller)
    async with Sessions(scorer, None) as sessions:
        with pytest.raises(UnknownVerifier, match="sessions and /run_jupyter run in the code verifier's sandbox"):
            await sessions.create(caller, CreateSessionRequest())
    settings: ServerSettings = settings_class()()
    verifier = ReasoningGymVerifier(settings)
    verifier.use_sandbox(None)
    await verifier.start()
    try:
        [result] = await verifier.verify([ReasoningGymVerifier.item_model.model_validate(
            {"response": "<answer>1</answer>", "task": "basic_arithmetic", "metadata": {}})])
    finally:
        await verifier.stop()
    assert (result.status, result.score, result.detail) == ("unavailable", None, NO_SANDBOX)
