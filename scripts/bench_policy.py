"""The policy benchmark of scripts/bench.py: decisions per second of the engine on a 50-rule
policy, without paths and with two paths (each canonicalised through the filesystem, as for
a real call). Returns its summary line."""

from __future__ import annotations

import json
import os
import time

from benchlib import ROOT, Scratch

from launcher.plan.session_plan import RunOptions, plan_session


def fifty_rule_policy(workspace: str) -> dict[str, object]:
    """The bundled rules behind 40 more that a real user's policy might carry (other
    servers, other directories, other domains), so a call walks most of the list."""
    with open(os.path.join(ROOT, "policy", "defaults", "compiled-policy.json")) as handle:
        bundled = json.load(handle)
    extra: list[dict[str, object]] = []
    for i in range(10):
        extra.append(
            {
                "name": f"allow-project-{i}-reads",
                "if": {
                    "effect": ["read"],
                    "paths": {"roles": ["read-path"], "within": f"/srv/project-{i}"},
                },
                "then": "allow",
                "reason": "project checkout",
            }
        )
        extra.append(
            {
                "name": f"escalate-project-{i}-writes",
                "if": {
                    "effect": ["write", "move"],
                    "paths": {"roles": ["write-path"], "within": f"/srv/project-{i}"},
                },
                "then": "escalate",
                "reason": "writes to a project need a human",
            }
        )
        extra.append(
            {
                "name": f"deny-tool-{i}",
                "if": {"server": [f"other-{i}"], "tool": ["anything"]},
                "then": "deny",
                "reason": "not for agents",
            }
        )
        extra.append(
            {
                "name": f"allow-docs-{i}",
                "if": {"domains": {"roles": ["fetch-url"], "allowed": [f"docs-{i}.example.com"]}},
                "then": "allow",
                "reason": "documentation site",
            }
        )
    rules = [*extra, *bundled["rules"]]
    assert len(rules) == 50, len(rules)
    return {**bundled, "rules": rules}


def bench_policy(quick: bool) -> str:
    rounds, per_round = (3, 5_000) if quick else (7, 20_000)
    scratch = Scratch.make()
    os.environ.update(scratch.env())
    policy_dir = os.path.join(scratch.root, "policy")
    os.makedirs(policy_dir)
    with open(os.path.join(policy_dir, "compiled-policy.json"), "w") as handle:
        json.dump(fifty_rule_policy(scratch.ws), handle)
    with open(os.path.join(ROOT, "policy", "defaults", "tool-annotations.json")) as handle:
        annotations = handle.read()
    with open(os.path.join(policy_dir, "tool-annotations.json"), "w") as handle:
        handle.write(annotations)
    plan = plan_session(RunOptions(workspace=scratch.ws, policy_dir=policy_dir))
    engine, ws = plan.engine, plan.workspace
    with open(os.path.join(ws, "draft.txt"), "w") as handle:
        handle.write("x")
    os.makedirs(os.path.join(ws, "notes", "2026"))
    cases = {
        "without paths (time: convert_time)": (
            "time",
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"},
        ),
        "with two paths (filesystem: move_file)": (
            "filesystem",
            "move_file",
            {"source": f"{ws}/draft.txt", "destination": f"{ws}/notes/2026/final.txt"},
        ),
    }
    print(f"policy decisions, 50 rules, canonicalisation included; best of {rounds} rounds")
    rates = {}
    for label, (server, tool, arguments) in cases.items():
        decision, _ = engine.decide(server, tool, arguments, cwd=ws)
        best = 0.0
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(per_round):
                engine.decide(server, tool, arguments, cwd=ws)
            best = max(best, per_round / (time.perf_counter() - started))
        rates[label] = best
        print(f"  {label:42} {best:10,.0f} /s   ({decision.decision}, rule {decision.rule})")
    scratch.remove()
    return "; ".join(f"{k.split(' (')[0]} {v:,.0f}/s" for k, v in rates.items())
