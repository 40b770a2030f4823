"""The ifeval verifier's settings section: ``--ifeval-<field>`` /
``REWARD_SERVER_IFEVAL_<FIELD>`` (composed into the server's settings).

Each is a cap on what multiplies an item's work, answered with the item's invalid_item (a
422 with on_invalid=error) naming the field. Every rule reads the response (eight copies of
it in loose mode), so an item costs its instructions times its response; a keyword is a
pattern compiled and searched for."""

from __future__ import annotations

from pydantic import BaseModel, Field


class IfEvalSettings(BaseModel):
    # Google's IFEval rows hold 1 to 3 instructions, open-instruct's RLVR-IFeval one, its
    # multi-constraint sets up to 6: 32 leaves room and bounds an item at 32 passes
    max_instructions: int = Field(32, ge=1, le=1024, description="Instructions in one item.")
    # IFEval's keyword lists hold 1 to 5 words
    max_keywords: int = Field(32, ge=1, le=1024, description="Entries in one keywords or "
                              "forbidden_words list.")
    # a keyword is a word or two, a section splitter a word; each is compiled as a pattern
    max_phrase_chars: int = Field(200, ge=1, le=100_000, description="Characters in one "
                                  "keyword, forbidden word, section splitter or postscript "
                                  "marker.")
