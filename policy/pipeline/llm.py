"""The LLM behind one small interface: a question (system text and prompt) in,
text out. ``AnthropicLLM`` asks the real API through the ``anthropic`` SDK; ``CachedLLM``
answers an unchanged question from disk; tests put the real SDK client on a transport
that replays recorded responses.

:func:`ask` is how the pipeline uses it: the answer must be one JSON object that a pydantic
model accepts (and that a check of the caller's finds no fault with). A malformed answer is
asked again, a bounded number of times, with what was wrong; then :class:`LLMError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

DEFAULT_MODEL = "claude-sonnet-4-5"
MAX_TOKENS = 16000
ATTEMPTS = 3

M = TypeVar("M", bound=BaseModel)


class LLMError(Exception):
    """The model could not be asked, or never gave a usable answer."""


class LLM(Protocol):
    model: str

    def complete(self, system: str, prompt: str) -> str: ...


class AnthropicLLM:
    """Claude through the ``anthropic`` SDK (imported only when a question is asked)."""

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        http_client: Any = None,
    ) -> None:
        import anthropic  # lazy: a second of import time only the pipeline pays

        self.model = model
        self._errors: tuple[type[BaseException], ...] = (anthropic.APIError,)
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, http_client=http_client, max_retries=2
        )

    def complete(self, system: str, prompt: str) -> str:
        try:
            message = self._client.messages.create(
                model=self.model,
                max_tokens=MAX_TOKENS,
                system=system,
                messages=[{"role": "user", "content": prompt}],
            )
        except self._errors as exc:
            raise LLMError(f"the model could not be asked: {exc}") from None
        return "".join(getattr(block, "text", "") for block in message.content)


class CachedLLM:
    """An LLM whose answers are kept on disk, keyed by the SHA-256 of everything that goes
    into the question (model, system text, prompt: the prompts carry the constitution and
    the tool schemas), so an unchanged input makes no request. ``force`` asks anew."""

    def __init__(self, inner: LLM, directory: Path, force: bool = False) -> None:
        self.inner = inner
        self.model = inner.model
        self.directory = directory
        self.force = force
        self.requests = 0  # questions that went to the model
        self.hits = 0

    def key(self, system: str, prompt: str) -> str:
        text = json.dumps([self.model, system, prompt], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def complete(self, system: str, prompt: str) -> str:
        path = self.directory / f"{self.key(system, prompt)}.json"
        if not self.force:
            try:
                answer = json.loads(path.read_text(encoding="utf-8"))["answer"]
                self.hits += 1
                return str(answer)
            except (OSError, ValueError, KeyError, TypeError):
                pass
        self.requests += 1
        answer = self.inner.complete(system, prompt)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"model": self.model, "answer": answer}), encoding="utf-8")
        os.replace(tmp, path)
        return answer

    def forget(self, system: str, prompt: str) -> None:
        """Drop an answer that turned out unusable, so a later run asks again."""
        (self.directory / f"{self.key(system, prompt)}.json").unlink(missing_ok=True)


def extract_json(text: str) -> str:
    """The JSON object in a model's answer (it may wrap it in a code fence or a sentence).

    >>> extract_json('Here:\\n```json\\n{"a": 1}\\n```')
    '{"a": 1}'
    """
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.DOTALL)
    if fenced:
        return fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text


def ask(
    llm: LLM,
    system: str,
    prompt: str,
    model: type[M],
    check: Callable[[M], list[str]] | None = None,
    what: str = "the answer",
    attempts: int = ATTEMPTS,
) -> M:
    """Ask until the answer parses as ``model`` and ``check`` finds no problem."""
    question = prompt
    problems: list[str] = []
    for _ in range(attempts):
        text = llm.complete(system, question)
        try:
            answer = model.model_validate_json(extract_json(text))
            problems = check(answer) if check is not None else []
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                for e in exc.errors()[:20]
            ]
        if not problems:
            return answer
        forget = getattr(llm, "forget", None)
        if forget is not None:
            forget(system, question)
        question = (
            f"{prompt}\n\nYour previous answer could not be used:\n"
            + "\n".join(f"- {p}" for p in problems)
            + "\nAnswer again with only the corrected JSON object."
        )
    raise LLMError(
        f"{what}: the model's answer was still unusable after {attempts} attempts:\n  "
        + "\n  ".join(problems)
    )
