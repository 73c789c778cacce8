"""Errors pyllm raises for bad input, as one exception hierarchy.

Every error a user can cause (a wrong model name, a missing or damaged file, a token id outside the
vocabulary, a prompt longer than the context) is a `PyllmError` whose message is one complete line:
the CLI prints `str(err)` and exits with status 1, never a traceback. Bugs stay ordinary exceptions.
"""

from __future__ import annotations


class PyllmError(Exception):
    """Base class: a user-facing error with a one-line message."""


class UnknownModelError(PyllmError):
    """A model name that is neither a known short name nor an existing path."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, known
        super().__init__(
            f"unknown model '{name}': known models are {', '.join(known)}, or give a path "
            "to a .gguf file or a Hugging Face checkpoint folder"
        )


class ModelNotFoundError(PyllmError):
    """A known model that is not installed, or a path that does not exist."""


class FormatError(PyllmError):
    """A weights file that is truncated, malformed or internally inconsistent."""


class UnsupportedTensorTypeError(FormatError):
    """A tensor stored in a type no kernel of ours reads (e.g. Q6_K)."""


class UnsupportedArchitectureError(PyllmError):
    """A well-formed file for an architecture pyllm does not implement."""


class TokenError(PyllmError):
    """A token id outside the vocabulary, or an empty prompt."""


class ContextOverflowError(PyllmError):
    """A prompt (plus the tokens to generate) longer than the model's context."""


class FetchError(PyllmError):
    """Downloading or verifying a model failed (offline, bad checksum, ...)."""


class EngineClosedError(PyllmError):
    """A request submitted to an engine that has been closed."""
