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
# Plain, non-empty names of a scope's owner (stream, tenant, agent, user, application)
# already checked: one rule for all of them but the empty name, which is never kept.
# Bounded at 16,384 names (of at most 255 bytes): tenants may be that many.
_VALID_NAMES: set[str] = set()


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
        plain = (
            type(self.stream) is str
            and type(self.tenant) is str
            and (agent is None or type(agent) is str)
            and (user is None or type(user) is str)
            and (application is None or type(application) is str)
            and (self.conversation is None or type(self.conversation) is str)
        )
        if plain and self in _VALID:
            # Only plain strings are looked up: a str subclass's own hash and equality
            # could claim a checked scope's place (it is checked as its plain text).
            return self
        self._check(plain)
        if not plain:
            for field in self.__struct_fields__:
                value = getattr(self, field)
                if value is not None and type(value) is not str:
                    # A str subclass, which no record can carry: the text it holds.
                    msgspec.structs.force_setattr(self, field, str.__str__(value))
        # Kept even when met once (a conversation of one item): asking a doorkeeper
        # first cost a fresh handle's fold of such a log a fifth more than the set's
        # entries cost the garbage collector (`laser_memory.doorkeeper`).
        if len(_VALID) >= 1 << 14:
            _VALID.clear()  # a crude bound: scopes repeat (16,384: tenants are many)
        _VALID.add(self)
        return self

    def _check(self, plain: bool = False) -> None:
        # The owner's names repeat across scopes (one stream, tenant or agent in many
        # conversations: a fold of a conversation per item met a new scope each record
        # and checked its stream and tenant again each time), so plain ones are checked
        # once; the conversation, which seldom repeats in a new scope, every time.
        for field, value in (
            ("stream", self.stream),
            ("tenant", self.tenant),
            ("agent", self.agent),
            ("user", self.user),
            ("application", self.application),
        ):
            if value is None and field not in ("stream", "tenant"):
                continue
            if plain and (value in _VALID_NAMES if value else field in ("stream", "tenant")):
                # Checked before, or the empty stream or tenant (the default tenant, met
                # at every new scope of most writers), which is always valid.
                continue
            validate_name(value, field, allow_empty=field in ("stream", "tenant"))  # type: ignore[arg-type]
            if plain and value:
                if len(_VALID_NAMES) >= 1 << 14:
                    _VALID_NAMES.clear()
                _VALID_NAMES.add(value)
        if self.conversation is not None:
            validate_name(self.conversation, "conversation")

    @property
    def owner(self) -> tuple[str, str, str | None, str | None, str | None]:
        """The owner part (stream, tenant, agent, user, application): what content ids hash."""
        return (self.stream, self.tenant, self.agent, self.user, self.application)
