"""Unit tests of the shared builds (sandbox/builds.py) and the harness's packing of them
(sandbox/harness/artifacts.py), on the host."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sandbox.builds import Builds, build_key, checker_key, valid_build
from sandbox.harness import artifacts
from sandbox.languages import LANGUAGES


def job(language: str, source: str, mode: str = "stdio") -> dict:
    return {"mode": mode, "language": LANGUAGES[language].as_job(256), "source": source}


def test_build_key() -> None:
    assert build_key(job("python", "print(1)")) is None  # nothing to compile
    assert build_key(job("c", "int main(){}", mode="assert")) is None
    a = build_key(job("c", "int main(){}"))
    assert a == build_key(job("c", "int main(){}"))
    assert a != build_key(job("cpp", "int main(){}")) and a != build_key(job("c", "int main(){ }"))
    # the memory limit is in the JVM's command: another limit, another build
    assert build_key(job("java", "x")) != build_key(
        {**job("java", "x"), "language": LANGUAGES["java"].as_job(512)})


def test_valid_build() -> None:
    assert valid_build({"files": {"main": [0o755, "AA=="]}}) is not None
    assert valid_build({"compile_error": "no"}) is not None
    for bad in [None, [], {}, {"files": {"main": "AA=="}}, {"files": {}, "compile_error": "x"},
                {"compile_error": 3}, {"files": {"m": [1, 2]}}]:
        assert valid_build(bad) is None, bad


def test_a_checkers_build_is_keyed_apart_and_kept_only_with_files() -> None:
    with_checker = {**job("python", "print(1)"), "checker": {
        "language": LANGUAGES["cpp"].as_job(256), "source": "int main(){}"}}
    key = checker_key(with_checker)
    assert key is not None and key == checker_key(dict(with_checker))
    assert checker_key(job("cpp", "int main(){}")) is None  # no checker
    python_checker = {**with_checker, "checker": {"language": LANGUAGES["python"].as_job(256),
                                                  "source": "print(1)"}}
    assert checker_key(python_checker) is None  # nothing to compile
    # the same source as a candidate's program is another build (other flags, other uid)
    assert key != build_key(job("cpp", "int main(){}"))
    builds = Builds()
    for not_one in [None, "x", {"compile_error": "no"}, {"files": {"m": [1, 2]}}]:
        builds.keep(key, not_one)
        assert builds.kept(key) is None, not_one
    builds.keep(key, {"files": {"check": [0o755, "AA=="]}})
    assert builds.kept(key) == {"files": {"check": [0o755, "AA=="]}}


def test_followers_wait_for_the_leader_and_a_failed_leader_lets_them_compile() -> None:
    async def scenario() -> None:
        builds = Builds()
        build, leader = await builds.claim("k")
        assert (build, leader) == (None, True)
        follower = asyncio.ensure_future(builds.claim("k"))
        await asyncio.sleep(0)
        assert not follower.done()  # waits for the leader's build
        builds.publish("k", {"files": {"main": [0o755, "AA=="]}})
        assert await follower == ({"files": {"main": [0o755, "AA=="]}}, False)
        assert await builds.claim("k") == ({"files": {"main": [0o755, "AA=="]}}, False)
        # a leader whose execution sent no build: followers compile themselves
        assert await builds.claim("j") == (None, True)
        follower = asyncio.ensure_future(builds.claim("j"))
        await asyncio.sleep(0)
        builds.publish("j", None)
        assert await follower == (None, False)
        assert len(builds) == 1

    asyncio.run(scenario())


def test_builds_are_kept_by_size() -> None:
    async def scenario() -> None:
        builds = Builds(max_bytes=10)
        for key in "abc":
            await builds.claim(key)
            builds.publish(key, {"compile_error": "x" * 4})
        assert len(builds) == 2 and (await builds.claim("a"))[1]  # the oldest went first

    asyncio.run(scenario())


@pytest.fixture
def as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pack and unpack as this process's own user (on the host, maybe root)."""
    monkeypatch.setattr(artifacts.slate, "isolated", lambda: False)


@pytest.mark.usefixtures("as_is")
def test_pack_and_unpack(tmp_path: Path) -> None:
    built = tmp_path / "built"
    (built / "com" / "acme").mkdir(parents=True)
    (built / ".cache").mkdir()
    (built / "Main.java").write_text("source")
    (built / "java.args").write_text("-cp . com.acme.Main")
    (built / "com" / "acme" / "Main.class").write_bytes(b"\xca\xfe")
    (built / ".cache" / "junk").write_text("build cache")
    (built / "main").write_bytes(b"\x7fELF")
    os.chmod(built / "main", 0o755)
    files = artifacts.pack(str(built), "Main.java")
    assert files is not None and sorted(files) == ["com/acme/Main.class", "java.args", "main"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    artifacts.unpack(files, str(fresh))
    assert (fresh / "com" / "acme" / "Main.class").read_bytes() == b"\xca\xfe"
    assert os.stat(fresh / "main").st_mode & 0o777 == 0o755
    for bad in ["../x", "/etc/x", "a/../../x", "a//b"]:
        with pytest.raises(ValueError):
            artifacts.unpack({bad: [0o644, ""]}, str(fresh))


@pytest.mark.usefixtures("as_is")
def test_too_large_a_build_is_not_packed(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "MAX_BYTES", 10)
    (tmp_path / "main").write_bytes(b"x" * 11)
    assert artifacts.pack(str(tmp_path), "main.c") is None
