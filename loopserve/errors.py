"""The one error type for bad user input: the CLI prints it on one line and exits 2."""

from __future__ import annotations

import re

# "scheduler.max_num_seqs: must be ..." -> field "scheduler.max_num_seqs"
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w\-\[\]]*(?:\.[\w\-\[\]]+)*): (.+)$", re.DOTALL)


class UserError(Exception):
    """Bad input named by field: rendered as ``<field>: <message>``."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = " ".join(str(message).split())  # always one line
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
