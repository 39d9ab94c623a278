"""The HTTP routes: vLLM's OpenAI-compatible API server's, over a `LiveSimulation`.

FastAPI on uvicorn, as vLLM's own API server (vllm/entrypoints/openai/api_server.py) is
built; bodies and error bodies follow its protocol (docs/serve.md lists what is kept).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from servesim import __version__
from servesim.serve.live import LiveSimulation, Stream
from servesim.serve.requests import ApiError, output_plan, parse


def make_app(live: LiveSimulation, metrics, served_names: list[str], root: str, api_key: str | None) -> FastAPI:
    app = FastAPI(title="servesim serve", version=__version__)
    created = int(time.time())

    if api_key is not None:
        app.add_middleware(ApiKeyCheck, api_key=api_key)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError):
        return JSONResponse(err.body(), status_code=err.status)

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/version")
    async def version():
        return {"version": live.spec.engine_version, "servesim": __version__}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "servesim", "root": root,
             "parent": None, "max_model_len": live.max_model_len, "permission": []} for name in served_names]}

    @app.get("/metrics")
    async def prometheus():
        live.advance()   # the state at the clock's time now
        return Response(metrics.render(live.sim), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await _json(request)
        if isinstance(body.get("messages"), list):
            from servesim.serve.prompts import render_chat

            ids = live.counter.tokens(render_chat(body["messages"]))
        elif isinstance(body.get("prompt"), str):
            ids = live.counter.tokens(body["prompt"])
        else:
            raise ApiError(400, "give prompt (a string) or messages", param="prompt")
        return {"count": len(ids), "max_model_len": live.max_model_len, "tokens": ids, "token_strs": None}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        tokens = (await _json(request)).get("tokens")
        if not isinstance(tokens, list) or not all(type(t) is int and t >= 0 for t in tokens):
            raise ApiError(400, "tokens must be a list of token ids", param="tokens")
        return {"prompt": live.counter.detokenize(tokens)}

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _generate(request, chat=True)

    async def _generate(request: Request, chat: bool):
        parsed = parse(await _json(request), live.counter, chat)
        if parsed.model is not None and parsed.model not in served_names:
            raise ApiError(404, f"The model `{parsed.model}` does not exist.", "NotFoundError", "model")
        prompt_tokens = len(parsed.prompt_ids)
        target, reason = output_plan(parsed, prompt_tokens, live)
        reply = Reply(live, chat, parsed.model or served_names[0], prompt_tokens)
        stream = live.submit(parsed.prompt_ids, target, reason, reply.id)
        if parsed.stream:
            return StreamingResponse(reply.events(stream, parsed.include_usage, request),
                                     media_type="text/event-stream")
        return await reply.whole(stream, request)

    return app


class ApiKeyCheck:
    """401 on /v1 routes without `Authorization: Bearer KEY`, as vLLM's --api-key. A plain ASGI
    middleware: Starlette's BaseHTTPMiddleware would hide a client's disconnect from the routes."""

    def __init__(self, app, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            if dict(scope["headers"]).get(b"authorization") != self.expected:
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _json(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except ValueError as err:
        raise ApiError(400, f"the request body is not JSON ({err})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


class Reply:
    """One response's bodies, streamed as server-sent events or whole."""

    def __init__(self, live: LiveSimulation, chat: bool, model: str, prompt_tokens: int) -> None:
        self.live, self.chat, self.model, self.prompt_tokens = live, chat, model, prompt_tokens
        self.created = int(time.time())
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{len(live.submitted)}"

    def _usage(self, completion: int) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}

    def _choice(self, text: str, finish: str | None, first: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

    def _chunk(self, choices: list, usage: dict | None = None) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    async def events(self, stream: Stream, include_usage: bool, request: Request) -> AsyncIterator[str]:
        text = self.live.counter.output_text
        sent = 0
        # The response does not read the request's channel while it streams: a watcher does, and
        # wakes the stream with GONE when the client disconnects.
        watcher = asyncio.ensure_future(_disconnected(request))
        watcher.add_done_callback(lambda task: task.cancelled() or stream.queue.put_nowait(GONE))
        try:
            if self.chat:
                yield self._chunk([self._choice("", None, first=True)])
            while sent < stream.target:
                outputs = await stream.queue.get()
                if outputs is GONE:
                    return
                finish = stream.finish_reason if outputs >= stream.target else None
                yield self._chunk([self._choice(text(outputs - sent), finish)])
                sent = outputs
            if include_usage:
                yield self._chunk([], self._usage(sent))
            yield "data: [DONE]\n\n"
        finally:
            watcher.cancel()
            if sent < stream.target:
                self.live.abort(stream)   # the client went away

    async def whole(self, stream: Stream, request: Request) -> JSONResponse | Response:
        waiting = asyncio.ensure_future(_finished(stream))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            waiting.cancel()
        if not stream.finished:
            self.live.abort(stream)
            return Response(status_code=499)
        text = self.live.counter.output_text(stream.delivered)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": stream.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": stream.finish_reason,
                      "stop_reason": None}
        return JSONResponse({"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                             "created": self.created, "model": self.model, "choices": [choice],
                             "usage": self._usage(stream.delivered)})


GONE = None   # put in a stream's queue when its client has disconnected


async def _finished(stream: Stream) -> None:
    while not stream.finished:
        await stream.queue.get()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
