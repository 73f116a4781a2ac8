"""A Responses API request's ``input``, ``tools`` and ``tool_choice`` in chat's shapes (pure).

Where it sits: called by ``serving.responses_protocol.ResponsesRequest`` while the request is
turned into the chat request the gateway runs. Input messages become chat messages (their
``input_text``/``output_text`` parts chat's text parts); a ``function_call`` item becomes an
assistant message's ``tool_calls`` (consecutive calls, and the assistant text just before
them, one message, as a chat conversation has them) and a ``function_call_output`` a ``tool``
message; ``reasoning`` items, which a client sends back when it replays an answer's output,
are left out, as chat has no place for them; an ``input_image`` part becomes chat's
``image_url`` part. Function tools move their ``name``, ``description``, ``parameters`` and
``strict`` under chat's ``function``. Anything else (hosted tools, files, an image by file id)
is a 400 naming where it is.
"""

from __future__ import annotations

from typing import Any

from serving.errors import ClientError

_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})  # what a chat message's text part is
_FUNCTION_FIELDS = ("name", "description", "parameters", "strict")


def unsupported(message: str, param: str) -> ClientError:
    return ClientError(message, param=param, code="unsupported_value")


def invalid(message: str, param: str) -> ClientError:
    return ClientError(message, param=param, code="invalid_value")


def _string(item: dict[str, Any], key: str, at: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise invalid(f"{at}.{key}: must be a string", f"{at}.{key}")
    return value


def _content(content: Any, at: str, *, images: bool = True) -> str | list[dict[str, Any]]:
    """An input message's content → a chat message's (text, or text and image parts; a tool's
    output, ``images`` False, only text)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise invalid(f"{at}: must be a string or a non-empty list of content parts", at)
    parts = []
    for index, part in enumerate(content):
        place = f"{at}.{index}"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(f"{place}: must be a content part, an object with a type", place)
        if part["type"] == "input_image" and images:
            parts.append(_image(part, place))
            continue
        if part["type"] not in _TEXT_PARTS:
            kinds = "input_text and input_image" if images else "input_text"
            raise unsupported(
                f"{place}.type: {part['type']!r} parts are not supported here; only {kinds}", f"{place}.type"
            )
        parts.append({"type": "text", "text": _string(part, "text", place)})
    return parts


def _image(part: dict[str, Any], at: str) -> dict[str, Any]:
    """An ``input_image`` part → chat's ``image_url`` part, which a vision model behind an
    OpenAI-compatible variant (vLLM) reads; a text-only engine refuses it."""
    if part.get("file_id") is not None:
        message = f"{at}.file_id: files are not kept here; send image_url (a URL or a data: URL)"
        raise unsupported(message, f"{at}.file_id")
    image: dict[str, Any] = {"url": _string(part, "image_url", at)}
    if part.get("detail") not in (None, "auto"):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _message(item: dict[str, Any], at: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        message = f"{at}.role: must be one of user, assistant, system, developer; got {role!r}"
        raise invalid(message, f"{at}.role")
    if "content" not in item:
        raise invalid(f"{at}.content: required", f"{at}.content")
    return {"role": role, "content": _content(item["content"], f"{at}.content")}


def _tool_output(item: dict[str, Any], at: str) -> str:
    output = item.get("output")
    if isinstance(output, list):  # text parts, as a function may answer
        found = _content(output, f"{at}.output", images=False)
        return found if isinstance(found, str) else "".join(part["text"] for part in found)
    return _string(item, "output", at)


def input_messages(items: list[Any], field: str = "input") -> list[dict[str, Any]]:
    """``input`` items → chat messages (``field``: where the items were sent, for a 400's
    ``param``: a conversation's are its ``items``)."""
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        at = f"{field}.{index}"
        if not isinstance(item, dict):
            raise invalid(f"{at}: must be an input item, an object with a role and content", at)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, at))
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", at),
                "type": "function",
                "function": {"name": _string(item, "name", at), "arguments": _string(item, "arguments", at)},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # its text, or calls, just before
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", at)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _tool_output(item, at)})
        elif kind != "reasoning":  # replayed reasoning: chat has no place for it
            raise unsupported(
                f"{at}.type: {kind!r} items are not supported here; only messages, function_call "
                "and function_call_output",
                f"{at}.type",
            )
    return messages


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function tools in chat's shape; any other kind of tool is refused."""
    found = []
    for index, tool in enumerate(tools):
        at = f"tools.{index}"
        if tool.get("type") != "function":
            raise unsupported(
                f"{at}.type: {tool.get('type')!r} tools are not supported here; only function tools "
                "(run by your code), which go to a backend that takes tools (vLLM with a tool parser)",
                f"{at}.type",
            )
        _string(tool, "name", at)
        found.append({"type": "function", "function": {k: tool[k] for k in _FUNCTION_FIELDS if k in tool}})
    return found


def chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """``auto``/``none``/``required``, or a named function, in chat's shape."""
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise invalid("tool_choice: must be auto, none, required or a function", "tool_choice")
        return choice
    if choice.get("type") != "function":
        message = f"tool_choice.type: {choice.get('type')!r} is not supported here; only function"
        raise unsupported(message, "tool_choice.type")
    return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
