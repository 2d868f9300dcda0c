"""Public names to servers: which server answers a tool, a prompt, a resource.

With several servers, tools and prompts are named ``<server>__<name>`` on the endpoint; with
one selected server their own names pass through. A resource is found by its exact URI,
else by the longest URI-template prefix. The router is rebuilt from the servers' lists
whenever one of them changes; it knows no process and no transport.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Protocol

from launcher.shared import param_headers
from launcher.shared.jsonrpc import COMPLETE, PROMPT, TOOL, Message, completion_arguments
from sandbox_profiles.records import mutable

SEPARATOR = "__"


class Listing(Protocol):
    """What a server said it offers (its ``*/list`` answers and its capabilities)."""

    @property
    def tools(self) -> list[Message]: ...

    @property
    def prompts(self) -> list[Message]: ...

    @property
    def resources(self) -> list[Message]: ...

    @property
    def resource_templates(self) -> list[Message]: ...

    @property
    def capabilities(self) -> Message: ...


@mutable
class _Shown:
    """A server's lists as the client sees them."""

    tools: list[Message]
    prompts: list[Message]
    resources: list[Message]
    resource_templates: list[Message]
    capabilities: Message


@mutable
class Router:
    """Which server answers each exposed tool, prompt, resource and template, and the
    lists the client is shown."""

    prefixed: bool
    tools: dict[str, tuple[str, str]] = field(default_factory=dict)
    prompts: dict[str, tuple[str, str]] = field(default_factory=dict)
    exposed_tools: list[Message] = field(default_factory=list)
    exposed_prompts: list[Message] = field(default_factory=list)
    resources: list[Message] = field(default_factory=list)
    resource_templates: list[Message] = field(default_factory=list)
    _resource_servers: dict[str, str] = field(default_factory=dict)
    _template_prefixes: list[tuple[str, str]] = field(default_factory=list)
    _template_servers: dict[str, str] = field(default_factory=dict)
    # Which servers declared what (for the endpoint's own capabilities and routing).
    completes: set[str] = field(default_factory=set)
    subscribes: set[str] = field(default_factory=set)
    offers_resources: set[str] = field(default_factory=set)
    # Listings filtered for callers (by the gate), dropped with each build.
    shown: dict[object, list[Message]] = field(default_factory=dict)

    def public(self, server: str, name: str) -> str:
        """The name clients see for a server's tool or prompt.

        >>> Router(prefixed=True).public("fs", "read_file")
        'fs__read_file'
        """
        return f"{server}{SEPARATOR}{name}" if self.prefixed else name

    def build(
        self,
        servers: Mapping[str, Listing],
        shown: Callable[[str, list[Message]], list[Message]] = lambda server, items: items,
    ) -> None:
        """Routes from the servers' lists; ``shown`` makes a server's items what the client
        is to see of them (credentials masked), once per build."""
        listings = {
            name: _Shown(
                shown(name, listing.tools),
                shown(name, listing.prompts),
                shown(name, listing.resources),
                shown(name, listing.resource_templates),
                listing.capabilities,
            )
            for name, listing in servers.items()
        }
        tools: dict[str, tuple[str, str]] = {}
        prompts: dict[str, tuple[str, str]] = {}
        exposed_tools: list[Message] = []
        exposed_prompts: list[Message] = []
        resources: dict[str, str] = {}
        prefixes: list[tuple[str, str]] = []
        templates: dict[str, str] = {}
        self.completes, self.subscribes, self.offers_resources = set(), set(), set()
        for name, listing in listings.items():
            # A tool whose header marks are unusable is listed to no client (nor routed).
            usable = [t for t in listing.tools if param_headers.fault(t) is None]
            _route(name, usable, self.public, tools, exposed_tools)
            _route(name, listing.prompts, self.public, prompts, exposed_prompts)
            for resource in listing.resources:
                resources.setdefault(str(resource.get("uri", "")), name)
            for template in listing.resource_templates:
                uri_template = str(template.get("uriTemplate", ""))
                templates.setdefault(uri_template, name)
                prefix = uri_template.split("{", 1)[0]
                if prefix:
                    prefixes.append((prefix, name))
            caps = listing.capabilities
            if isinstance(caps.get("completions"), dict):
                self.completes.add(name)
            offered = caps.get("resources")
            if isinstance(offered, dict):
                self.offers_resources.add(name)
                if offered.get("subscribe") is True:
                    self.subscribes.add(name)
        self.shown = {}
        self.tools, self.exposed_tools = tools, exposed_tools
        self.prompts, self.exposed_prompts = prompts, exposed_prompts
        self.resources = [r for s in listings.values() for r in s.resources]
        self.resource_templates = [t for s in listings.values() for t in s.resource_templates]
        self._resource_servers, self._template_servers = resources, templates
        # Longest prefix first, so the most specific template wins.
        self._template_prefixes = sorted(prefixes, key=lambda p: -len(p[0]))

    def resource(self, uri: str) -> str | None:
        """The server that answers for ``uri``, if any."""
        server = self._resource_servers.get(uri)
        if server is not None:
            return server
        for prefix, owner in self._template_prefixes:
            if uri.startswith(prefix):
                return owner
        # A URI nobody lists (made at run time, or read before it is listed) goes to the
        # one server that offers resources, as it would without ironcurtain in between.
        if len(self.offers_resources) == 1:
            return next(iter(self.offers_resources))
        return None

    def target(self, method: str, params: Message) -> tuple[str | None, str, dict[str, object]]:
        """For a checked request: the server it goes to (None: no server offers it), that
        server's own name of what is asked for, and the arguments the gate checks. The
        request's shape was checked before (``arguments`` an object; a completion's
        ``ref`` and ``argument``)."""
        if method == TOOL:
            public = params.get("name")
            route = self.tools.get(public) if isinstance(public, str) else None
            arguments = params.get("arguments") or {}
            args = arguments if isinstance(arguments, dict) else {"": arguments}
            return (*route, args) if route else (None, str(public), args)
        if method == PROMPT:
            public = params.get("name")
            route = self.prompts.get(public) if isinstance(public, str) else None
            args = params.get("arguments") or {}
            assert isinstance(args, dict)  # checked before
            return (*route, args) if route else (None, str(public), args)
        if method == COMPLETE:
            ref = params["ref"]
            completed = completion_arguments(params)
            assert completed is not None  # checked before
            if ref.get("type") == "ref/prompt":
                route = self.prompts.get(str(ref.get("name")))
                if route is None:
                    return None, f"ref/prompt {ref.get('name')}", completed
                return route[0], f"ref/prompt {route[1]}", completed
            template = str(ref.get("uri"))
            return self.template(template), f"ref/resource {template}", completed
        uri = params.get("uri")
        server = self.resource(uri) if isinstance(uri, str) else None
        return server, method, {"uri": str(uri)}

    def template(self, uri_template: str) -> str | None:
        """The server that offers the resource template ``uri_template`` (completions)."""
        return self._template_servers.get(uri_template)

    def capabilities(self) -> Message:
        """What the endpoint offers its client: the union of what the servers offer."""
        caps: Message = {"tools": {"listChanged": True}, "logging": {}}
        if self.exposed_prompts:
            caps["prompts"] = {"listChanged": True}
        if self.resources or self.resource_templates or self.offers_resources:
            caps["resources"] = {"listChanged": True, "subscribe": bool(self.subscribes)}
        if self.completes:
            caps["completions"] = {}
        return caps


def _route(
    server: str,
    items: Sequence[Message],
    public: Callable[[str, str], str],
    routes: dict[str, tuple[str, str]],
    exposed: list[Message],
) -> None:
    for item in items:
        own = str(item.get("name", ""))
        name = public(server, own)
        routes[name] = (server, own)
        exposed.append({**item, "name": name})
