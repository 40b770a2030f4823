"""Who a caller is (reward_server/callers.py): the quota an address counts in, the tokens a
server takes and how a presented one is matched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reward_server.callers import Caller, Tokens, caller_of_scope, load_tokens, quota_of
from reward_server.settings import ServerSettings


@pytest.mark.parametrize(("address", "quota"), [
    # any local process can use any loopback address: one quota for all of them
    ("127.0.0.1", "loopback"), ("127.0.0.2", "loopback"), ("127.255.0.9", "loopback"),
    ("::1", "loopback"), ("::ffff:127.0.0.3", "loopback"),
    # a host given an IPv6 /64 picks any address in it
    ("2001:db8:1:2::1", "2001:db8:1:2::/64"), ("2001:db8:1:2:ffff::7", "2001:db8:1:2::/64"),
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    # another IPv4 address needs the network's say: each is its own
    ("10.0.0.1", "10.0.0.1"), ("10.0.0.2", "10.0.0.2"), ("::ffff:10.0.0.2", "10.0.0.2"),
    # not an address (a Ray handle's caller name, no client): itself
    ("ray-job-01", "ray-job-01"), ("unknown", "unknown"),
])
def test_quota_of(address: str, quota: str) -> None:
    assert quota_of(address) == quota


def test_caller_of_scope() -> None:
    assert caller_of_scope({"client": ("127.0.0.2", 5)}) == Caller("127.0.0.2", "loopback")
    assert caller_of_scope({"client": None}) == Caller("unknown", "unknown")
    # a token's name wins over the address, and two teams on one address are two callers
    team = caller_of_scope({"client": ("127.0.0.1", 5), "reward_server.caller": "team-a"})
    assert team == Caller("team-a", "token:team-a") and str(team) == "team-a"
    assert team != caller_of_scope({"client": ("127.0.0.1", 5),
                                    "reward_server.caller": "team-b"})


def test_tokens_identify_by_name() -> None:
    tokens = Tokens({"a": "alpha-token", "b": "beta-token"})
    assert tokens.identify(b"alpha-token") == "a" and tokens.identify(b"beta-token") == "b"
    for wrong in (b"", b"alpha", b"alpha-token ", b"beta-tokenX", b"a"):
        assert tokens.identify(wrong) is None, wrong
    assert not Tokens({}) and tokens.first() == "alpha-token"


def _settings(tmp_path: Path, text: str | None, token: str | None = None) -> ServerSettings:
    path = None
    if text is not None:
        path = tmp_path / "tokens"
        path.write_text(text)
        os.chmod(path, 0o600)
    return ServerSettings(api_token=token, api_tokens_file=path)


def test_load_tokens(tmp_path: Path) -> None:
    assert not load_tokens(_settings(tmp_path, None))
    assert load_tokens(_settings(tmp_path, None, "flag-token")).names == ["default"]
    tokens = load_tokens(_settings(tmp_path, "# teams\n\nteam-a: tok:with:colons\nb.2:x\n",
                                   "flag-token"))
    assert tokens.names == ["default", "team-a", "b.2"]
    assert tokens.identify(b"tok:with:colons") == "team-a"
    assert tokens.identify(b"flag-token") == "default"


@pytest.mark.parametrize(("text", "token", "error"), [
    ("", None, "holds no 'name:token' line"),
    ("# only a comment\n", "flag-token", "holds no 'name:token' line"),
    ("just-a-secret-token\n", None, "line 1: not 'name:token'"),
    ("a:x\nbad name:secret-y\n", None, "line 2: not 'name:token'"),
    ("a:\n", None, "line 1: not 'name:token'"),
    ("a:secret-x\na:secret-y\n", None, "line 2: the name 'a' is given twice"),
    ("default:secret-x\n", "flag-token", "(api_token is 'default')"),
    ("a:secret-x\nb:secret-x\n", None, "line 2: its token is another name's too"),
])
def test_load_tokens_refuses(tmp_path: Path, text: str, token: str | None, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        load_tokens(_settings(tmp_path, text, token))
    assert error in str(raised.value)
    for secret in ("secret-x", "secret-y", "just-a-secret-token"):  # never a token in it
        assert secret not in str(raised.value)


def test_load_tokens_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="api_tokens_file .*nope"):
        load_tokens(ServerSettings(api_tokens_file=tmp_path / "nope"))
