"""The LLM faked at its HTTP edge: the real ``anthropic`` client, its transport replaying
recorded Messages API responses (tests/data/llm/<set>/<stage>.json, written by hand as the
model would answer). Every request is kept, so a test can say how many went out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2

from policy.pipeline.llm import AnthropicLLM

RECORDINGS = Path(__file__).parent / "data" / "llm"


def stage_of(body: dict[str, Any]) -> str:
    """Which pipeline question a request is: annotate-<server>, compile, scenarios, or
    judge-<round> (a question asked again after a bad answer gets a -retry suffix)."""
    prompt = body["messages"][0]["content"]
    retry = "-retry" if "Your previous answer could not be used" in prompt else ""
    if m := re.match(r'Annotate every tool of the MCP server "([^"]+)"', prompt):
        return f"annotate-{m.group(1)}{retry}"
    if prompt.startswith("Compile this constitution"):
        return f"compile{retry}"
    if prompt.startswith("Write test scenarios"):
        return f"scenarios{retry}"
    if m := re.match(r"Round (\d+) of at most", prompt):
        return f"judge-{m.group(1)}{retry}"
    raise AssertionError(f"an LLM question the recordings do not know: {prompt[:80]!r}")


class Replay:
    def __init__(self, *sets: str) -> None:
        """Recordings from ``sets``, the first that has a stage wins (a variant set lists
        only what it changes)."""
        self.sets = sets
        self.requests: list[str] = []

    def answer(self, stage: str) -> dict[str, Any]:
        for name in self.sets:
            path = RECORDINGS / name / f"{stage}.json"
            if path.exists():
                return dict(json.loads(path.read_text(encoding="utf-8")))
        raise AssertionError(f"no recording for {stage} in {self.sets}")

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path.endswith("/v1/messages"), request.url
        # The key reaches the API (this SDK sends it as a bearer token; older ones as
        # x-api-key).
        assert "test-key" in (
            request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
        )
        body = json.loads(request.content)
        stage = stage_of(body)
        self.requests.append(stage)
        return httpx2.Response(200, json=self.answer(stage))

    def llm(self, model: str = "claude-test") -> AnthropicLLM:
        client = httpx2.Client(transport=httpx2.MockTransport(self.handle))
        return AnthropicLLM(model, "test-key", "https://api.anthropic.invalid", client)


def message(text: str) -> dict[str, Any]:
    """A Messages API response carrying ``text``, as the API returns it."""
    return {
        "id": "msg_recorded",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1000, "output_tokens": 500},
    }
