"""Scopes: who an item belongs to, and what a recall may see.

A `MemoryScope` names the stream, the tenant, the agent, the conversation, and
optionally the user and application of an item. On recall every field you set
narrows and every field you leave out widens, except the tenant: it is a hard
boundary, and an unset tenant means the tenant ``""``, never every tenant.

>>> MemoryScope(stream="prod", agent="planner").agent
'planner'
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .ids import validate_name

__all__ = ["Lifetime", "MemoryScope"]

Lifetime = Literal["session", "durable"]


# Scopes already checked: writes and folds meet the same few scopes again and again.
_VALID: set[MemoryScope] = set()


class MemoryScope(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True, gc=False):
    """The scope of one item or one write. Part of the wire format (schema v1).

    >>> MemoryScope(conversation="c1", agent="triage").conversation
    'c1'
    """

    stream: str = ""
    tenant: str = ""
    agent: str | None = None
    user: str | None = None
    application: str | None = None
    conversation: str | None = None

    def validated(self) -> MemoryScope:
        """Return self after checking every field fits in a record; raises `InvalidName`."""
        agent, user, application = self.agent, self.user, self.application
        if (
            type(self.stream) is str
            and type(self.tenant) is str
            and (agent is None or type(agent) is str)
            and (user is None or type(user) is str)
            and (application is None or type(application) is str)
            and (self.conversation is None or type(self.conversation) is str)
            and self in _VALID
        ):
            # Only plain strings are looked up: a str subclass's own hash and equality
            # could claim a checked scope's place (it is checked as its plain text).
            return self
        self._check()
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if value is not None and type(value) is not str:
                # A str subclass, which no record can carry: the text it holds.
                msgspec.structs.force_setattr(self, field, str.__str__(value))
        if len(_VALID) >= 4096:
            _VALID.clear()  # a crude bound: scopes repeat, so this is rare
        _VALID.add(self)
        return self

    def _check(self) -> None:
        validate_name(self.stream, "stream", allow_empty=True)
        validate_name(self.tenant, "tenant", allow_empty=True)
        for field in ("agent", "user", "application", "conversation"):
            value = getattr(self, field)
            if value is not None:
                validate_name(value, field)

    @property
    def owner(self) -> tuple[str, str, str | None, str | None, str | None]:
        """The owner part (stream, tenant, agent, user, application): what content ids hash."""
        return (self.stream, self.tenant, self.agent, self.user, self.application)
