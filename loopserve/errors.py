"""The one error type for bad user input: the CLI prints it on one line and exits 2."""

from __future__ import annotations

import re

# a message past this many characters is cut in the middle: an offending value of megabytes
# must not become a megabyte line (paths and the fix at either end survive)
MAX_MESSAGE_CHARS = 400

# "scheduler.max_num_seqs: must be ..." -> field "scheduler.max_num_seqs"
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w\-\[\]]*(?:\.[\w\-\[\]]+)*): (.+)$", re.DOTALL)


class UserError(Exception):
    """Bad input named by field: rendered as ``<field>: <message>``."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = _bounded(" ".join(str(message).split()))  # always one short line
        super().__init__(f"{field}: {self.message}")

    @classmethod
    def from_value_error(cls, err: ValueError, default_field: str, context: str = "") -> UserError:
        """Wrap a core/sim ``ValueError("field: ...")``, keeping its field when it names one."""
        text = " ".join(str(err).split())
        m = _FIELD_PREFIX.match(text)
        field, message = (m.group(1), m.group(2)) if m else (default_field, text)
        if context:
            message = f"{message} ({context})"
        return cls(field, message)


def _bounded(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    half = MAX_MESSAGE_CHARS // 2 - 10
    return f"{text[:half]} ...[{len(text) - 2 * half} characters]... {text[-half:]}"


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (a list of 10^6 items names its size)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} items)" if isinstance(value, (list, tuple, dict, set)) else ""
    return f"{text[:limit - 3]}...{size}"
