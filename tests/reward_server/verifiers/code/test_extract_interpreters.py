"""The code extractor under every Python 3.11 the server runs on: the offline server image
runs Debian 12's (3.11.2), whose regular expressions match possessive quantifiers wrongly
(fixed in 3.11.5); an extractor written with them read every fenced program as its whole
response there, and the sandbox scored correct programs 0 as syntax errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CASES = {
    "```python\nprint(1)\n```": "print(1)",
    "Here:\n```python\nprint(sum(map(int, input().split())))\n```\nDone.": (
        "print(sum(map(int, input().split())))"),
    "```\nfirst\n```\ntext\n```cpp\nint main() {}\n```": "int main() {}",
    "```python\ncut off": "cut off",
    "no fence at all\n": "no fence at all",
}
PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("extract", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps([module.extract_code(text) for text in json.loads(sys.argv[2])]))
"""


def interpreters() -> list[str]:
    found = {sys.executable}
    for name in ("/usr/bin/python3", shutil.which("python3.11")):
        if name and subprocess.run([name, "-c", "import sys; assert sys.version_info >= (3, 11)"],
                                   capture_output=True).returncode == 0:
            found.add(name)
    return sorted(found)


@pytest.mark.parametrize("python", interpreters())
def test_fenced_programs_are_extracted_the_same_on_every_interpreter(python: str) -> None:
    out = subprocess.run([python, "-c", PROBE, str(ROOT / "reward_server" / "verifiers" /
                                                  "code" / "extract.py"), json.dumps(list(CASES))],
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == list(CASES.values()), python
