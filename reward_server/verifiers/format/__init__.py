"""The ``format`` verifier (docs/format.md): R1's think/answer layout, open-r1's tag counts and
a required final-answer form, as structure rewards beside an accuracy reward."""

from reward_server.verifiers.format.items import FormatItem, FormatResult, RuleVerdict
from reward_server.verifiers.format.verifier import FormatVerifier

__all__ = ["FormatItem", "FormatResult", "FormatVerifier", "RuleVerdict"]
