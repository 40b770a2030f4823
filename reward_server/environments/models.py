"""The wire models of the OpenEnv environments (docs/environments.md): OpenEnv's ``Action``,
``Observation`` and ``State`` subclasses, shared by the server's environments and the clients
(``reward_server.environments.client``), so both ends validate the same fields.

OpenEnv's base models forbid unknown fields: a misspelt action field is a validation error
naming it, never a field silently dropped."""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


# OpenEnv's Action.metadata takes any nested data, which nothing here reads: held while a
# step runs, 11 MB of it pinned ~300 MB per connection. An action carries none.
def no_metadata() -> Any:
    return Field(default_factory=dict, max_length=0, description="Unused: must be empty.")

# --- the code interpreter --------------------------------------------------------------------


class CodeAction(Action):
    """One cell for the episode's interpreter."""

    code: str = Field(description="Python source, run in the interpreter reset() opened; "
                      "the value of its last expression is shown (display).")
    cell_timeout: float = Field(0, ge=0, description="Seconds of wall clock; 0: the server's "
                                "session_cell_timeout_s; capped by its "
                                "session_max_cell_timeout_s.")
    metadata: dict[str, Any] = no_metadata()


class CodeObservation(Observation):
    """What a cell did, with the fields of a ``/v1/sessions`` cell result; ``done`` once
    the interpreter is gone (it died, or a cell that would not stop was killed);
    ``provenance``: what ran it (the block ``/v1/sessions`` runs answer with)."""

    status: Literal["Success", "Failed", "Ready"] = Field(
        "Ready", description="Success: the cell finished without an exception; Failed: an "
        "exception, a limit, or the interpreter lost; Ready: reset's answer.")
    message: str = Field("", description="Empty on Success; else what stopped the cell.")
    cell_status: Literal["Finished", "TimeLimitExceeded", "Error"] | None = None
    stdout: str = ""
    stderr: str = ""
    display: list[dict[str, Any]] = Field(default_factory=list, description="The last "
                                          "expression's value: [{'text/plain': repr}].")
    error: list[dict[str, Any]] = Field(default_factory=list, description="The exception: "
                                        "[{'ename', 'evalue', 'traceback'}].")
    execution_time: float | None = None
    python: str | None = Field(None, description="The interpreter's version.")
    provenance: dict[str, Any] | None = Field(None, description="A step's: the sandbox's "
                                              "code, settings, runtime and image "
                                              "(SandboxProvenance, docs/rescore.md).")


class CodeState(State):
    """The episode: its interpreter's state (open, or why it ended) and its limits."""

    session_state: str | None = Field(None, description="open, closed, expired, lost, "
                                      "shutdown; null before reset.")
    limits: dict[str, Any] | None = None


# --- a verifier ------------------------------------------------------------------------------


class VerifierAction(Action):
    """The answer to the item reset() set: scored by the item's verifier."""

    response: str = Field(description="The completion, as a verifier item's 'response'.")
    metadata: dict[str, Any] = no_metadata()


class VerifierObservation(Observation):
    """The verifier's verdict: ``reward`` is its score (null when the item could not be
    scored for a reason outside the response, e.g. the sandbox unavailable), ``status`` its
    status word, ``result`` the verifier's whole result, ``provenance`` what produced it (the
    block ``/v1/verify`` answers with). One answer per episode: ``done``."""

    verifier: str = ""
    status: str = Field("ready", description="ready (reset's answer), else the result's.")
    result: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] | None = None


class VerifierState(State):
    verifier: str | None = None
    scored: bool = False
