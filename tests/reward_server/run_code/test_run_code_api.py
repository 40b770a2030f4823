"""``POST /run_code``'s and ``POST /run_jupyter``'s refusals, through the real server: what
is checked before any container is asked for (the language, the sizes, the paths, the cells),
each a 4xx naming the field, and the server's token (bearer, or Basic with it as the
password), which guards them as it guards the verifiers. No engine needed."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from reward_server.run_code.languages import known_languages, run_code_language
from sandbox.config import MIN_MEMORY_MB
from sandbox.harness.paths import MAX_PATH_BYTES
from tests.conftest import ServerProcess, run_server

LIMIT = 4096  # the server's max_field_bytes here
TOKEN = "run-code-secret"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_MAX_FIELD_BYTES": str(LIMIT), "REWARD_SERVER_API_TOKEN": TOKEN}
    with run_server(tmp_path_factory.mktemp("run-code-api"), env=env) as server:
        yield server


def post(srv: ServerProcess, body: dict, token: str | None = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(srv.url + "/run_code", json=body, headers=headers, timeout=30)


def test_unknown_language_lists_the_known_ones(srv: ServerProcess) -> None:
    r = post(srv, {"code": "<?php echo 1;", "language": "php"})
    assert r.status_code == 422
    assert r.json()["detail"] == (f"language: unknown language 'php'; known languages: "
                                  f"{known_languages()}")
    for name in ("python", "cpp", "nodejs", "go", "java", "rust", "bash", "c"):
        assert name in r.json()["detail"]


@pytest.mark.parametrize("field", ["code", "stdin"])
def test_oversized_code_or_stdin_names_the_field(srv: ServerProcess, field: str) -> None:
    body = {"code": "print(1)", "language": "python", field: "x" * (LIMIT + 1)}
    r = post(srv, body)
    assert r.status_code == 413
    assert r.json()["detail"].startswith(f"{field}: {LIMIT + 1} bytes exceed the limit of "
                                         f"{LIMIT} bytes")


# Names that passed the old check and broke the harness: a 503 SandboxError (blamed on the
# sandbox, counted in its metrics) and a container spent, for the caller's own input
NAMES_REFUSED: list[tuple[dict, int, str]] = [
    ({"files": {"a\0b": ""}}, 422, "files['a\\x00b']: a control character ('\\x00')"),
    ({"files": {"a" * 5000: ""}}, 422, f"files['{'a' * 100}…']: more than {MAX_PATH_BYTES} bytes"),
    ({"files": {"n" * 256: ""}}, 422, "files['" + "n" * 100 + "…']: a component of 256 bytes, "
     "more than NAME_MAX (255)"),
    ({"files": {"d/" * 3000 + "f": ""}}, 422,  # RecursionError in os.makedirs
     f"files['{'d/' * 50}…']: more than {MAX_PATH_BYTES} bytes"),
    ({"files": {"d/" * 64 + "f": ""}}, 422, f"files['{'d/' * 50}…']: 65 levels deep, more than 64"),
    ({"files": {"a": "", "a/b": ""}}, 422, "files['a/b']: its directory 'a' is files['a'], a file"),
    ({"files": {"a/b": "", "a\\b": ""}}, 422, "files['a\\\\b']: the same file as files['a/b']"),
    ({"fetch_files": ["ok.txt", "x" * 200_000]}, 422,
     f"fetch_files[1]: more than {MAX_PATH_BYTES} bytes"),
    ({"fetch_files": ["x" * 200_000] * 200}, 422,
     f"fetch_files[0]: more than {MAX_PATH_BYTES} bytes"),
    ({"fetch_files": ["a\0"]}, 422, "fetch_files[0]: a control character"),
]
# below it the interpreter does not start: /run_jupyter's was a 503 SandboxError
MEMORY_REFUSED = [({"memory_limit_MB": mb}, f"memory_limit_MB: Value error, {mb} MB is below "
                   f"the least a program or interpreter may ask for, {MIN_MEMORY_MB} MB")
                  for mb in (1, 8, MIN_MEMORY_MB - 1)]


@pytest.mark.parametrize(("extra", "detail"), [
    ({"files": {"../x": base64.b64encode(b"1").decode()}}, "files['../x']: a relative path"),
    ({"files": {"/etc/x": ""}}, "files['/etc/x']: a relative path"),
    ({"files": {"main.py": ""}}, "files['main.py']: the program's own file name"),
    ({"files": {"a.txt": "not base64!"}}, "files['a.txt']: not base64"),
    ({"fetch_files": ["ok.txt", "a/../../b"]}, "fetch_files[1]: a relative path"),
    ({"fetch_files": ["a.txt"] * 257}, "fetch_files: 257 paths, more than 256"),
    ({"files": {f"f{k}": "" for k in range(1025)}}, "files: 1025 files, more than 1024"),
    ({"run_timeout": 0}, "run_timeout: Input should be greater than 0"),
    ({"memory_limit_MB": "lots"}, "memory_limit_MB: Input should be a valid integer"),
    *[(extra, detail) for extra, _, detail in NAMES_REFUSED],
    ({"files": {"main.py/x": ""}},
     "files['main.py/x']: its directory 'main.py' is the program's own file, a file"),
    *MEMORY_REFUSED,
])
def test_bad_fields_are_named(srv: ServerProcess, extra: dict, detail: str) -> None:
    r = post(srv, {"code": "print(1)", "language": "python", **extra})
    assert r.status_code == 422, r.text[:1000]
    assert r.json()["detail"].startswith(detail), r.json()
    assert len(r.content) < 1000  # a name of megabytes is shown cut, not echoed


LEFT_OUT = "(left out)"
JUPYTER_REFUSED: list[tuple[dict, int, str]] = [
    ({"cells": LEFT_OUT}, 422, "cells: Field required"),
    ({"cells": []}, 422, "cells: List should have at least 1 item"),
    ({"cells": ["1"] * 65}, 422, "cells: List should have at most 64 items"),
    ({"cells": "print(1)"}, 422, "cells: Input should be a valid list"),
    ({"cells": ["1", 2]}, 422, "cells[1]: Input should be a valid string"),
    ({"cells": ["1", "x" * (LIMIT + 1)]}, 413,
     f"cells[1]: {LIMIT + 1} bytes exceed the limit of {LIMIT} bytes"),
    ({"cell_timeout": -1}, 422, "cell_timeout: Input should be greater than or equal to 0"),
    ({"total_timeout": 0}, 422, "total_timeout: Input should be greater than 0"),
    ({"kernel": "ruby"}, 422, "kernel: Input should be 'python3'"),
    ({"memory_limit_MB": "lots"}, 422, "memory_limit_MB: Input should be a valid integer"),
    ({"files": {"../x": ""}}, 422, "files['../x']: a relative path"),
    ({"files": {"a.txt": "not base64!"}}, 422, "files['a.txt']: not base64"),
    ({"files": {"a.txt": "A" * (LIMIT + 4)}}, 413, "files['a.txt']: "),
    ({"fetch_files": ["ok.txt", "/etc/passwd"]}, 422, "fetch_files[1]: a relative path"),
    ({"fetch_files": ["a.txt"] * 257}, 422, "fetch_files: 257 paths, more than 256"),
    *NAMES_REFUSED,
    *[(extra, 422, detail) for extra, detail in MEMORY_REFUSED],
]


@pytest.mark.parametrize(("extra", "status", "detail"), JUPYTER_REFUSED)
def test_run_jupyter_names_the_bad_field(srv: ServerProcess, extra: dict, status: int,
                                         detail: str) -> None:
    """SandboxFusion's run_jupyter request, each field wrong in turn: refused before any
    container is asked for."""
    body = {k: v for k, v in {"cells": ["print(1)"], **extra}.items() if v != LEFT_OUT}
    r = httpx.post(srv.url + "/run_jupyter", json=body,
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert r.status_code == status, r.text[:1000]
    assert r.json()["detail"].startswith(detail), r.json()


@pytest.mark.parametrize(("extra", "detail"), [
    *[(extra, detail) for extra, _, detail in NAMES_REFUSED if "files" in extra],
    *MEMORY_REFUSED,
])
def test_a_session_names_the_bad_field(srv: ServerProcess, extra: dict, detail: str) -> None:
    """A session's files and memory meet the same checks, before any container."""
    r = httpx.post(srv.url + "/v1/sessions", json=extra,
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert r.status_code == 422, r.text[:1000]
    assert r.json()["detail"].startswith(detail), r.json()


def test_the_bearer_token_guards_run_jupyter(srv: ServerProcess) -> None:
    body = {"cells": ["print(1)"], "kernel": "ruby"}  # refused after auth, before the sandbox
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.post(srv.url + "/run_jupyter", json=body, headers=headers, timeout=30)
        assert r.status_code == 401, r.text
    basic = base64.b64encode(f"sandbox-fusion:{TOKEN}".encode()).decode()
    r = httpx.post(srv.url + "/run_jupyter", json=body,
                   headers={"Authorization": f"Basic {basic}"}, timeout=30)
    assert r.status_code == 422, r.text


def test_the_bearer_token_guards_it(srv: ServerProcess) -> None:
    body = {"code": "print(1)", "language": "php"}  # refused after auth, before the sandbox
    assert post(srv, body, token=None).status_code == 401
    assert post(srv, body, token="wrong").status_code == 401
    assert post(srv, body).status_code == 422


@pytest.mark.parametrize(("header", "status"), [
    (f"Basic {base64.b64encode(f'verl:{TOKEN}'.encode()).decode()}", 422),
    (f"basic {base64.b64encode(f':{TOKEN}'.encode()).decode()}", 422),  # no user name
    (f"Basic {base64.b64encode(b'verl:wrong').decode()}", 401),
    (f"Basic {base64.b64encode(f'{TOKEN}:'.encode()).decode()}", 401),  # token as the user
    (f"Basic {base64.b64encode(TOKEN.encode()).decode()}", 401),  # no colon
    ("Basic not-base64!", 401),
    (f"Basic {base64.b64encode(f'verl:{TOKEN}x'.encode()).decode()}", 401),
])
def test_basic_auth_takes_the_token_as_its_password(srv: ServerProcess, header: str,
                                                    status: int) -> None:
    """What ``requests`` sends for ``http://user:<token>@host/run_code`` (veRL's client)."""
    r = httpx.post(srv.url + "/run_code", json={"code": "print(1)", "language": "php"},
                   headers={"Authorization": header}, timeout=30)
    assert r.status_code == status, r.text
    if status == 401:
        assert r.headers.get_list("www-authenticate") == ["Bearer",
                                                          'Basic realm="reward_server"']


@pytest.mark.parametrize(("name", "ours"), [
    ("python", "python"), ("Python3", "python"), ("nodejs", "javascript"), ("js", "javascript"),
    ("cpp", "cpp"), ("go", "go"), ("java", "java"), ("rust", "rust"), ("bash", "bash"),
    ("sh", "bash"), ("c", "c"), ("typescript", None), ("go_test", None),
])
def test_language_names(name: str, ours: str | None) -> None:
    spec = run_code_language(name)
    assert (spec.name if spec else None) == ours



@pytest.mark.parametrize("path", ["/run_code", "/run_jupyter", "/v1/sessions"])
def test_a_map_of_millions_of_files_is_refused_as_it_arrives(srv: ServerProcess, path: str
                                                             ) -> None:
    """4,000,000 empty files (55 MB, inside the body and batch limits) held every caller's
    event loop for 11-15 s while they were parsed and checked, then refused (fresh-context
    audit). The sandbox routes' bodies are a program and a few files: past their count of
    JSON values they are a 413 as the body arrives, never parsed."""
    files = {f"f{k}": "" for k in range(300_000)}
    r = httpx.post(srv.url + path, json={"code": "print(1)", "language": "python",
                                         "files": files},
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert r.status_code == 413, r.text[:300]
    assert "REWARD_SERVER_MAX_SANDBOX_JSON_VALUES" in r.json()["detail"]
