"""OpenAI's Conversations API objects: a conversation, its items, and what may be put in one (pure).

Where it sits: ``serving.api.conversations_route`` serves ``/v1/conversations`` with these
shapes and keeps them through ``serving.store.conversations``; a ``/v1/responses`` request
naming a ``conversation`` reads its items before its own input and, once answered, has its
input and output items added to it (``serving.api.stored_responses``). Items are the Responses
API's own (``message``, ``function_call``, ``function_call_output``, ``reasoning``) and are
checked as a request's ``input`` is (``serving.responses_input``): a conversation holds only
what a later response can read back.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from serving.responses_context import input_items
from serving.responses_input import input_messages, invalid, unsupported

MAX_ITEMS_PER_CALL = 20  # as OpenAI: "You may add up to 20 items at a time"

_Key = Annotated[str, StringConstraints(max_length=64)]
_Value = Annotated[str, StringConstraints(max_length=512)]
Metadata = Annotated[dict[_Key, _Value], Field(max_length=16)]  # OpenAI's metadata limits


class NewConversation(BaseModel):
    """``POST /v1/conversations``' body."""

    model_config = ConfigDict(extra="forbid")
    items: list[Any] | None = None
    metadata: Metadata | None = None


class NewItems(BaseModel):
    """``POST /v1/conversations/{id}/items``' body."""

    model_config = ConfigDict(extra="forbid")
    items: list[Any]


class ConversationUpdate(BaseModel):
    """``POST /v1/conversations/{id}``' body: its metadata, replaced whole."""

    model_config = ConfigDict(extra="forbid")
    metadata: Metadata


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation; its items are kept beside it, in order."""

    conversation_id: str
    owner: str  # whose key made it: only that key reads, changes or deletes it
    created_at: float
    metadata: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.conversation_id,
            "object": "conversation",
            "created_at": int(self.created_at),
            "metadata": self.metadata,
        }


def new_conversation_id() -> str:
    return f"conv_{secrets.token_hex(24)}"


def deleted(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def conversation_items(raw: list[Any], field: str = "items") -> list[dict[str, Any]]:
    """Items sent to be added, checked as a response's input would be, each with a new id (one
    replayed from an answer loses its own, so that ids stay unique here) and a message's
    ``status``; at most ``MAX_ITEMS_PER_CALL``."""
    if len(raw) > MAX_ITEMS_PER_CALL:
        message = f"{field}: at most {MAX_ITEMS_PER_CALL} items may be added at a time; got {len(raw)}"
        raise invalid(message, field)
    input_messages(raw, field)  # the same 400s a response's input gets, naming these items
    fresh = [{key: value for key, value in item.items() if key != "id"} for item in raw]
    return with_status(input_items(fresh, secrets.token_hex(12)))  # ids unique in the conversation


def with_status(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as a conversation lists them: a message without a ``status`` has completed."""
    return [
        {**item, "status": "completed"} if item.get("type") == "message" and "status" not in item else item
        for item in items
    ]


def conversation_id_of(given: str | dict[str, Any] | None) -> str | None:
    """A Responses request's ``conversation``: its id, or the object ``{"id": …}``."""
    if given is None or isinstance(given, str):
        return given
    found = given.get("id")
    if not isinstance(found, str) or set(given) != {"id"}:
        message = "conversation: must be a conversation id, or an object with only its id"
        raise invalid(message, "conversation")
    return found


def refuse_include(include: list[str] | None) -> None:
    """``include`` names extra output (search results, image urls, logprobs) none of these items has."""
    if include:
        raise unsupported(f"include: {include[0]!r} is not supported here", "include")
