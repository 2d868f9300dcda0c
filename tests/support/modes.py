"""The ``mcp`` SDK's ``Client`` in a protocol mode of its choosing (``legacy``, ``auto`` or a
version pinned), through ``ironcurtain run`` over stdio or ``--http``; a :class:`Human`
answers what it is asked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.support.asking import ELICIT, SAMPLE, Human
from tests.support.home import Home
from tests.support.http import TOKEN, serving
from tests.support.paths import IRONCURTAIN

STATELESS = "2026-07-28"


def wire(params: Any) -> dict[str, Any]:
    """Request params as they came on the wire."""
    wired: dict[str, Any] = params.model_dump(by_alias=True, exclude_none=True)
    return wired


def callbacks(human: Human) -> dict[str, Any]:
    """The client's elicitation and sampling callbacks: ``human`` answers."""

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        said = human.answer({"method": ELICIT, "params": wire(params)})
        return types.ElicitResult.model_validate(said)

    async def sample(context: Any, params: Any) -> types.CreateMessageResult:
        said = human.answer({"method": SAMPLE, "params": wire(params)})
        return types.CreateMessageResult.model_validate(said)

    return {"elicitation_callback": elicit, "sampling_callback": sample}


@asynccontextmanager
async def client_in(
    user: Home, transport: str, args: Sequence[str], mode: str, human: Human | None = None
) -> AsyncIterator[Client]:
    """``ironcurtain run *args`` as ``user``, its client in ``mode`` over ``transport``
    (``stdio`` or ``http``); connected."""
    answering = callbacks(human) if human is not None else {}
    if transport == "stdio":
        target = StdioServerParameters(
            command=IRONCURTAIN, args=["run", *args], env=user.env, cwd=str(user.root)
        )
        async with Client(target, mode=mode, **answering) as client:
            yield client
        return
    with serving(user, *args) as served:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=bearer, timeout=30) as http,
            Client(
                streamable_http_client(served.url, http_client=http), mode=mode, **answering
            ) as client,
        ):
            yield client
