"""Settings have one home: each verifier declares its section, the CLI composes them, so
``--help`` and docs/settings.md list every setting; the names users set stay the same; a
verifier receives its own section; worker processes get one serialized settings object."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from reward_server.cli import _parse, _settings_file
from reward_server.settings import SETTINGS_FILE_ENV, get_settings, settings_class
from reward_server.settings_doc import builtin_settings_class, render
from reward_server.verifiers.code import CodeVerifier, SandboxSettings
from reward_server.verifiers.math import MathVerifier
from reward_server.verifiers.math.settings import MathSettings
from sandbox.config import SandboxConfig
from tests.conftest import ROOT


def test_docs_settings_page_is_generated_from_the_models() -> None:
    page = (ROOT / "docs" / "settings.md").read_text()
    assert page == render(builtin_settings_class()), (
        "docs/settings.md is stale: python -m reward_server.settings_doc > docs/settings.md")


def test_help_lists_every_setting_with_each_verifiers_section() -> None:
    out = subprocess.run([sys.executable, "-m", "reward_server.cli", "--help"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    for name in builtin_settings_class().model_fields:
        assert f"--{name.replace('_', '-')} " in out.stdout, name
    assert "--sandbox-pool-size" in out.stdout and "--math-timeout-s" in out.stdout


def test_the_names_users_set_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWARD_SERVER_SANDBOX_POOL_SIZE", "3")
    monkeypatch.setenv("REWARD_SERVER_SANDBOX_DOCKER_HOSTS", "unix:///a.sock, tcp://b:2376")
    monkeypatch.setenv("REWARD_SERVER_MATH_TIMEOUT_S", "5")
    settings = settings_class()()
    assert settings.sandbox_pool_size == 3 and settings.math_timeout_s == 5.0
    assert settings.sandbox_docker_hosts == ["unix:///a.sock", "tcp://b:2376"]
    flags = _parse(["--sandbox-pool-size", "2", "--math-timeout-s", "7", "--port", "9"])
    assert (flags.sandbox_pool_size, flags.math_timeout_s, flags.port) == (2, 7.0, 9)


def test_each_verifier_receives_its_own_section_not_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWARD_SERVER_SANDBOX_POOL_SIZE", "7")  # must not win over the object
    settings = settings_class()(sandbox_pool_size=2, sandbox_item_budget_s=9,
                                math_workers=3)
    code = CodeVerifier(settings)
    assert isinstance(code.config, SandboxSettings)
    assert (code.config.pool_size, code.config.item_budget_s) == (2, 9.0)
    assert code.config.config().pool_size == 2  # what the sandbox is built from
    math = MathVerifier(settings)
    assert isinstance(math.config, MathSettings) and math.config.resolved_workers() == 3


def test_the_sandbox_section_is_made_from_sandbox_config() -> None:
    """Each field ``SandboxConfig`` marks a ``setting`` is a ``--sandbox-*`` setting with its
    default and its help (one edit there adds one here); the sandbox's own fields are not."""
    fields = settings_class().model_fields
    for f in dataclasses.fields(SandboxConfig):
        info = fields.get(f"sandbox_{f.name}")
        if "doc" not in f.metadata:
            assert info is None, f.name
            continue
        assert info is not None and info.description == f.metadata["doc"], f.name
        default = info.get_default(call_default_factory=True)
        assert (tuple(default) if isinstance(default, list) else default) == f.default, f.name
    assert SandboxSettings().config() == SandboxConfig()


def test_a_bad_section_value_is_refused_at_start_naming_the_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "reward_server.cli", "--sandbox-pool-size", "0"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("reward-server: invalid settings") and "sandbox_pool_size" in (
        out.stderr)


def test_workers_get_one_serialized_settings_object(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_class()(api_token=SecretStr("s3cret"), sandbox_pool_size=3,
                                math_tolerance=1e-3, plugins=[])
    path = Path(_settings_file(settings))
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # it holds the token
        assert json.loads(path.read_text())["api_token"] == "s3cret"
        monkeypatch.setenv(SETTINGS_FILE_ENV, str(path))
        monkeypatch.setenv("REWARD_SERVER_SANDBOX_POOL_SIZE", "9")  # the file wins
        get_settings.cache_clear()
        loaded = get_settings()
        assert loaded.api_token is not None and loaded.api_token.get_secret_value() == "s3cret"
        assert (loaded.sandbox_pool_size, loaded.math_tolerance) == (3, 1e-3)
        assert loaded.model_dump() == settings.model_dump()
    finally:
        get_settings.cache_clear()
        path.unlink()


def test_a_sections_nested_secrets_reach_the_workers_in_clear() -> None:
    """A plug-in's section may hold secrets in lists and models: the workers' file must
    carry their values, not pydantic's '**********'."""
    from pydantic import BaseModel, SecretStr

    from reward_server.settings import compose_settings

    class Creds(BaseModel):
        user: str = "v"
        password: SecretStr = SecretStr("")

    class Section(BaseModel):
        tokens: list[SecretStr] = []
        creds: Creds = Creds()

    cls = compose_settings({"vault": Section})
    settings = cls(vault_tokens=[SecretStr("a1"), SecretStr("a2")],
                   vault_creds=Creds(password=SecretStr("nested")))
    data = settings.dump_secret()
    assert data["vault_tokens"] == ["a1", "a2"] and data["vault_creds"]["password"] == "nested"
    loaded = cls.model_validate(json.loads(json.dumps(data)))
    section = loaded.section("vault")
    assert [t.get_secret_value() for t in section.tokens] == ["a1", "a2"]
    assert section.creds.password.get_secret_value() == "nested"


@pytest.mark.parametrize("args", [["--log-level", "bogus"],
                                  ["--plugins", '["clash_plugin:SamePrefix"]', "--help"],
                                  ["--plugins", '["clash_plugin:SameSetting"]']])
def test_bad_settings_are_one_line_not_a_traceback(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "clash_plugin.py").write_text(
        "from pydantic import BaseModel\n"
        "from reward_server.verifiers.math import MathVerifier\n"
        "class S(BaseModel):\n    x: int = 1\n"
        "class SamePrefix(MathVerifier):\n    name = 'other'\n    settings_prefix = 'math'\n"
        "    settings_model = S\n"
        "class Budget(BaseModel):\n    budget_s: float = 1.0\n"
        "class SameSetting(MathVerifier):\n    name = 'request'\n    settings_model = Budget\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run([sys.executable, "-m", "reward_server.cli", *args], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, (out.stdout[-500:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, (
        out.stderr)
