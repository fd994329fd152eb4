"""Translation between the Responses API and Chat Completions.

Upstreams such as vLLM and llama.cpp speak only Chat Completions; programs such as the codex CLI
speak only Responses. This module turns a Responses request into a Chat Completions body, a
chat.completion (or its stream of chunks) into a Responses object and the SSE events a Responses
client needs: every output item gets ``response.output_item.done``, ``response.completed``
carries ``response.id``, function_call ``arguments`` are a JSON string. Function tools are
translated, and so are the function tools of a ``namespace`` (codex's MCP servers): the model
sees each as ``<namespace>__<name>`` (:func:`qualified_name`), and its
call of one goes back as a ``function_call`` with ``namespace`` and ``name`` apart, as a
Responses client expects. Other tool types are dropped. Pure functions and a small stateful
streamer; no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from interplay._plumbing import codec as _codec
from interplay._plumbing import ids
from interplay.model.request import BadRequest

_CHAT_ROLES = {"system": "system", "developer": "system", "user": "user",
               "assistant": "assistant"}
_SAMPLING = ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty",
             "logit_bias", "top_logprobs", "user")


def new_id(prefix: str) -> str:
    return f"{prefix}_{ids.new_id(12)}"


def _text_of(content: Any, where: str) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of parts", where)
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise BadRequest(f"{where}.content[{i}] must be an object", where)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text", "refusal"):
            parts.append({"type": "text", "text": str(part.get("text") or
                                                       part.get("refusal") or "")})
        elif kind == "input_image":
            url = part.get("image_url")
            if isinstance(url, str):
                parts.append({"type": "image_url", "image_url": {"url": url}})
    if all(p["type"] == "text" for p in parts):
        # Parts are separate blocks (codex sends its instructions and each skill as parts of
        # one developer message): a blank line keeps them apart. A plain string, since every
        # Chat Completions upstream takes one and not all take a list of parts.
        return "\n\n".join(p["text"] for p in parts if p["text"])
    return parts


def responses_to_chat(body: Any) -> dict[str, Any]:
    """The Chat Completions body for a Responses request; BadRequest if it does not fit."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    raw_input = body.get("input")
    if raw_input is None:
        raise BadRequest("missing required parameter: 'input'", "input")
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("'instructions' must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw_input, str):
        messages.append({"role": "user", "content": raw_input})
    elif isinstance(raw_input, list):
        for i, item in enumerate(raw_input):
            _add_item(messages, item, f"input[{i}]")
    else:
        raise BadRequest("'input' must be a string or a list of items", "input")
    out: dict[str, Any] = {"messages": messages}
    if body.get("model") is not None:
        out["model"] = body["model"]
    tools = []
    for i, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, Mapping):
            raise BadRequest(f"tools[{i}] must be an object", "tools")
        if tool.get("type") == "namespace":
            namespace = tool.get("name")
            inner = tool.get("tools")
            if not isinstance(namespace, str) or not isinstance(inner, list):
                raise BadRequest(f"tools[{i}]: a namespace needs a name and a list of tools",
                                 "tools")
            for j, member in enumerate(inner):
                if isinstance(member, Mapping) and member.get("type") == "function":
                    tools.append(_chat_tool(member, f"tools[{i}].tools[{j}]", namespace))
            continue
        if tool.get("type") != "function":
            continue  # hosted and custom tools have no Chat Completions form
        tools.append(_chat_tool(tool, f"tools[{i}]"))
    if tools:
        out["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, str):
            out["tool_choice"] = choice
        elif isinstance(choice, Mapping) and choice.get("type") == "function":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        if isinstance(body.get("parallel_tool_calls"), bool):
            out["parallel_tool_calls"] = body["parallel_tool_calls"]
    for key in _SAMPLING:
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) \
        else None
    if isinstance(fmt, Mapping):
        if fmt.get("type") == "json_schema":
            out["response_format"] = {"type": "json_schema", "json_schema": {
                k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
        elif fmt.get("type") == "json_object":
            out["response_format"] = {"type": "json_object"}
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def qualified_name(namespace: Any, name: str) -> str:
    """A tool's name as a Chat Completions model sees it: a tool of a Responses ``namespace``
    (codex puts each MCP server's tools in one, ``mcp__<server>``) gets the namespace in front,
    joined by ``__`` as codex named MCP tools before namespaces
    (``mcp__interplay__message_user``); a tool of no namespace keeps its name."""
    return f"{namespace}__{name}" if isinstance(namespace, str) and namespace else name


def _chat_tool(tool: Mapping[str, Any], where: str,
               namespace: str | None = None) -> dict[str, Any]:
    """A Responses function tool (of ``namespace``, if any) as a Chat Completions tool."""
    if not isinstance(tool.get("name"), str):
        raise BadRequest(f"{where}.name must be a string", "tools")
    fn: dict[str, Any] = {"name": qualified_name(namespace, tool["name"])}
    if tool.get("description") is not None:
        fn["description"] = tool["description"]
    fn["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    if tool.get("strict") is not None:
        fn["strict"] = tool["strict"]
    return {"type": "function", "function": fn}


def namespaced_tools(request: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The request's tools of a namespace, by the name the Chat Completions model calls them:
    ``{"mcp__interplay__message_user": ("mcp__interplay", "message_user")}``."""
    out: dict[str, tuple[str, str]] = {}
    for tool in request.get("tools") or ():
        if not isinstance(tool, Mapping) or tool.get("type") != "namespace":
            continue
        namespace, inner = tool.get("name"), tool.get("tools")
        if not isinstance(namespace, str) or not isinstance(inner, list):
            continue
        for member in inner:
            if isinstance(member, Mapping) and isinstance(member.get("name"), str):
                out[qualified_name(namespace, member["name"])] = (namespace, member["name"])
    return out


def _add_item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    if not isinstance(item, Mapping):
        raise BadRequest(f"{where} must be an object", "input")
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        role = _CHAT_ROLES.get(str(item.get("role")))
        if role is None:
            raise BadRequest(f"{where}.role must be system, developer, user or assistant",
                             "input")
        content = _text_of(item.get("content"), where)
        messages.append({"role": role, "content": content})
    elif kind == "function_call":
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise BadRequest(f"{where}: a function_call needs call_id and name", "input")
        name = qualified_name(item.get("namespace"), name)
        args = item.get("arguments")
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str)
                             else _codec.dumps({} if args is None else args).decode()}}
        last = messages[-1] if messages else None
        # Calls of one turn belong to one assistant message (after its text, if any).
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
            if last.get("content") == "":
                last["content"] = None
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            raise BadRequest(f"{where}: a function_call_output needs call_id", "input")
        output = item.get("output")
        text = output if isinstance(output, str) else _text_of(output, where)
        if not isinstance(text, str):
            text = _codec.dumps(text).decode()
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    # reasoning and other item types have no Chat Completions form: dropped


# Sampling keys as a seat or an endpoint configures them (Chat Completions names) and their
# Responses names, for a Responses request forwarded as it is. The Responses API has no seed,
# stop or penalties: those cannot be forwarded and are reported back to the caller.
_RESPONSES_NAMES = {"temperature": "temperature", "top_p": "top_p",
                    "max_tokens": "max_output_tokens",
                    "max_completion_tokens": "max_output_tokens",
                    "max_output_tokens": "max_output_tokens", "top_logprobs": "top_logprobs",
                    "parallel_tool_calls": "parallel_tool_calls", "reasoning": "reasoning",
                    "service_tier": "service_tier", "truncation": "truncation", "user": "user",
                    "store": "store", "metadata": "metadata"}


def sampling_for_responses(sampling: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``sampling`` in Responses names, and the keys that have no Responses form."""
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in sampling.items():
        if key == "reasoning_effort":
            reasoning = out.get("reasoning")
            out["reasoning"] = {**(reasoning if isinstance(reasoning, Mapping) else {}),
                                "effort": value}
        elif key in _RESPONSES_NAMES:
            out[_RESPONSES_NAMES[key]] = value
        else:
            dropped.append(key)
    return out, dropped


# -- chat.completion -> Response --------------------------------------------------------------


def responses_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not isinstance(usage, Mapping):
        return None
    p = int(usage.get("prompt_tokens") or 0)
    c = int(usage.get("completion_tokens") or 0)
    return {"input_tokens": p, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": c, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": int(usage.get("total_tokens") or p + c)}


def message_item(text: str, item_id: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call_item(call: Mapping[str, Any], item_id: str,
              namespaced: Mapping[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """A chat tool call as a Responses ``function_call``; a call of a namespace's tool (named
    as in ``namespaced``) carries its ``namespace`` and the tool's own name."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    name = fn.get("name") or ""
    item = {"type": "function_call", "id": item_id, "status": "completed",
            "call_id": call.get("id") or new_id("call"), "name": name,
            "arguments": args if isinstance(args, str) else _codec.dumps(args or {}).decode()}
    if namespaced and name in namespaced:
        item["namespace"], item["name"] = namespaced[name]
    return item


def response_object(*, resp_id: str, model: str, output: list[dict[str, Any]],
                    usage: Mapping[str, Any] | None, request: Mapping[str, Any],
                    status: str = "completed", created_at: int | None = None) -> dict[str, Any]:
    return {"id": resp_id, "object": "response", "created_at": created_at or int(time.time()),
            "status": status, "model": model, "output": output,
            "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
            "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools", []),
            "usage": responses_usage(usage) if usage is not None and "prompt_tokens" in usage
            else usage, "error": None, "incomplete_details": None}


def chat_to_response(completion: Mapping[str, Any], request: Mapping[str, Any], *,
                     resp_id: str | None = None, msg_id: str | None = None,
                     call_ids: list[str] | None = None) -> dict[str, Any]:
    """The Responses object for a chat.completion answering ``request`` (a Responses body)."""
    choices = completion.get("choices") or [{}]
    msg = choices[0].get("message") or {}
    output: list[dict[str, Any]] = []
    text = msg.get("content")
    if isinstance(text, list):
        text = "".join(str(p.get("text", "")) for p in text if isinstance(p, Mapping))
    calls = msg.get("tool_calls") or []
    if text or not calls:
        output.append(message_item(text or "", msg_id or new_id("msg")))
    namespaced = namespaced_tools(request) if calls else None
    for i, call in enumerate(calls):
        ident = call_ids[i] if call_ids and i < len(call_ids) else new_id("fc")
        output.append(call_item(call, ident, namespaced))
    status = "incomplete" if choices[0].get("finish_reason") == "length" else "completed"
    return response_object(resp_id=resp_id or new_id("resp"),
                           model=str(completion.get("model") or request.get("model") or ""),
                           output=output, usage=completion.get("usage"), request=request,
                           status=status)


# -- SSE events --------------------------------------------------------------------------------


def sse(event: Mapping[str, Any]) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (str(event["type"]).encode(), _codec.dumps(event))


class ResponsesEvents:
    """Builds the Responses SSE event sequence, numbering events as it goes."""

    def __init__(self, resp_id: str, model: str, request: Mapping[str, Any]) -> None:
        self.resp_id = resp_id
        self.model = model
        self.request = request
        self.seq = 0
        self.created_at = int(time.time())

    def ev(self, kind: str, **fields: Any) -> bytes:
        fields["type"] = kind
        fields["sequence_number"] = self.seq
        self.seq += 1
        return sse(fields)

    def created(self) -> list[bytes]:
        shell = response_object(resp_id=self.resp_id, model=self.model, output=[], usage=None,
                                request=self.request, status="in_progress",
                                created_at=self.created_at)
        return [self.ev("response.created", response=shell),
                self.ev("response.in_progress", response=shell)]

    def message_start(self, idx: int, item_id: str) -> list[bytes]:
        item = message_item("", item_id, status="in_progress")
        item["content"] = []
        return [self.ev("response.output_item.added", output_index=idx, item=item),
                self.ev("response.content_part.added", item_id=item_id, output_index=idx,
                        content_index=0, part={"type": "output_text", "text": "",
                                               "annotations": []})]

    def text_delta(self, idx: int, item_id: str, delta: str) -> bytes:
        return self.ev("response.output_text.delta", item_id=item_id, output_index=idx,
                       content_index=0, delta=delta, logprobs=[])

    def message_end(self, idx: int, item: Mapping[str, Any]) -> list[bytes]:
        text = item["content"][0]["text"]
        return [self.ev("response.output_text.done", item_id=item["id"], output_index=idx,
                        content_index=0, text=text, logprobs=[]),
                self.ev("response.content_part.done", item_id=item["id"], output_index=idx,
                        content_index=0, part=item["content"][0]),
                self.ev("response.output_item.done", output_index=idx, item=item)]

    def call_events(self, idx: int, item: Mapping[str, Any]) -> list[bytes]:
        added = dict(item, arguments="", status="in_progress")
        return [self.ev("response.output_item.added", output_index=idx, item=added),
                self.ev("response.function_call_arguments.delta", item_id=item["id"],
                        output_index=idx, delta=item["arguments"]),
                self.ev("response.function_call_arguments.done", item_id=item["id"],
                        output_index=idx, arguments=item["arguments"]),
                self.ev("response.output_item.done", output_index=idx, item=item)]

    def completed(self, response: Mapping[str, Any]) -> bytes:
        kind = "response.incomplete" if response.get("status") == "incomplete" \
            else "response.completed"
        return self.ev(kind, response=dict(response, created_at=self.created_at))

    def failed(self, message: str, code: str = "server_error") -> bytes:
        shell = response_object(resp_id=self.resp_id, model=self.model, output=[], usage=None,
                                request=self.request, status="failed",
                                created_at=self.created_at)
        shell["error"] = {"code": code, "message": message}
        return self.ev("response.failed", response=shell)


def events_for_response(response: Mapping[str, Any],
                        request: Mapping[str, Any]) -> list[bytes]:
    """The whole SSE event sequence for a finished Response object."""
    evs = ResponsesEvents(response["id"], str(response.get("model") or ""), request)
    out = evs.created()
    for idx, item in enumerate(response.get("output") or ()):
        if item.get("type") == "message":
            out += evs.message_start(idx, item["id"])
            text = item["content"][0]["text"] if item.get("content") else ""
            if text:
                out.append(evs.text_delta(idx, item["id"], text))
            out += evs.message_end(idx, item)
        elif item.get("type") == "function_call":
            out += evs.call_events(idx, item)
        else:
            out.append(evs.ev("response.output_item.added", output_index=idx, item=item))
            out.append(evs.ev("response.output_item.done", output_index=idx, item=item))
    out.append(evs.completed(response))
    return out


class ChatToResponsesStream:
    """Turns a live stream of chat.completion chunks into Responses SSE events.

    Text deltas are forwarded as they arrive; tool calls are emitted whole once the stream
    ends (their arguments are only valid JSON then).
    """

    def __init__(self, request: Mapping[str, Any], model: str) -> None:
        self.request = request
        self.resp_id = new_id("resp")
        self.msg_id = new_id("msg")
        self.events = ResponsesEvents(self.resp_id, model, request)
        self.started_text = False

    def start(self) -> list[bytes]:
        return self.events.created()

    def chunk(self, chunk: Mapping[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        for ch in chunk.get("choices") or ():
            if ch.get("index", 0) != 0:
                continue
            delta = (ch.get("delta") or {}).get("content")
            if delta:
                if not self.started_text:
                    self.started_text = True
                    out += self.events.message_start(0, self.msg_id)
                out.append(self.events.text_delta(0, self.msg_id, delta))
        return out

    def failed(self, message: str, code: str = "server_error") -> bytes:
        """The event that ends this stream with an error."""
        return self.events.failed(message, code)

    def finish(self, completion: Mapping[str, Any]) -> tuple[list[bytes], dict[str, Any]]:
        """The closing events and the Response object built from the reassembled completion."""
        response = chat_to_response(completion, self.request, resp_id=self.resp_id,
                                    msg_id=self.msg_id)
        out: list[bytes] = []
        for idx, item in enumerate(response["output"]):
            if item["type"] == "message":
                if not self.started_text:
                    out += self.events.message_start(idx, item["id"])
                out += self.events.message_end(idx, item)
            else:
                out += self.events.call_events(idx, item)
        out.append(self.events.completed(response))
        return out, response
