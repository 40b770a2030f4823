"""Infrastructure failures of the sandbox, as opposed to what the program did.

    SandboxError
    └── SandboxUnavailable   no engine, no image, or no container could be had: the item
                             cannot be scored (never a reward of 0)
"""


class SandboxError(Exception):
    pass


class SandboxUnavailable(SandboxError):
    """The message says what is wrong and what to run."""
