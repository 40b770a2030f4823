"""Language detection for IFEval's three language checks, through ``langdetect`` (the
``ifeval`` extra). The server starts without it; the checks that need it then say so.

langdetect samples at random: unseeded, a short text can be English on one call and Dutch on
the next, so a cached reward would depend on the call that filled the cache. Our own factory
is seeded (0), which makes a text's language a function of the text.
"""

from __future__ import annotations

import threading
from typing import Any

MISSING = ("langdetect is not installed: pip install 'verifiable-rewards[ifeval]' to check "
           "the language instructions")

_factory: Any = None
_lock = threading.Lock()


def available() -> bool:
    try:
        import langdetect  # noqa: F401
    except ImportError:
        return False
    return True


def _load() -> Any:
    global _factory
    with _lock:
        if _factory is None:
            from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

            factory = DetectorFactory()
            factory.load_profile(PROFILES_DIRECTORY)
            factory.set_seed(0)
            _factory = factory
    return _factory


def warm_up() -> None:
    """Load the 55 profiles now (about a second), not under the first item."""
    if available():
        _load()


def detect(text: str) -> str | None:
    """The language code langdetect gives ``text``, or None when it finds no features (a
    text of digits and punctuation). Raises ImportError without langdetect."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _load().create()
    detector.append(text)
    try:
        return detector.detect()
    except LangDetectException:
        return None
