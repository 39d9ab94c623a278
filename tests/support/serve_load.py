"""A load generator for `servesim serve`: many concurrent streaming completions at planned
arrival times (an httpx/asyncio client of the project's own; docs/serve.md says why not an
external one), each request's first and last chunk times as the client saw them."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Planned:
    offset_ns: int            # simulated time after the first request
    prompt: list[int]
    max_tokens: int


@dataclass(frozen=True)
class Seen:
    response_id: str
    sent_s: float             # wall clock (perf_counter) when the request was sent
    first_s: float
    last_s: float
    chunks: int
    usage: dict


async def _one(client, url: str, planned: Planned, start: float, speed: float) -> Seen:
    await asyncio.sleep(max(0.0, start + planned.offset_ns / speed / 1e9 - time.perf_counter()))
    body = {"prompt": planned.prompt, "max_tokens": planned.max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    first = last = None
    chunks, usage, response_id = 0, None, ""
    async with client.stream("POST", f"{url}/v1/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            response_id = data["id"]
            if data["choices"]:
                last = time.perf_counter()
                first = first or last
                chunks += 1
            elif "usage" in data:
                usage = data["usage"]
    return Seen(response_id, sent, first, last, chunks, usage)


async def _all(url: str, plan: list[Planned], speed: float) -> list[Seen]:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(600.0)) as client:
        start = time.perf_counter()
        return list(await asyncio.gather(*(_one(client, url, p, start, speed) for p in plan)))


def drive(url: str, plan: list[Planned], speed: float) -> list[Seen]:
    """Send every planned request (one stream each, all concurrent) and wait for the last."""
    return asyncio.run(_all(url, plan, speed))
