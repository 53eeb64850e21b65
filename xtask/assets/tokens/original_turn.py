"""Runs the reference turn of `cargo xtask bench tokens` on the original
(Python) Crewlet engine and writes every request it sends to the model.

The original's code is not part of this repository: `--src` points at its
`src/` directory, exported from a mirror of its repository at run time. Its
own loader reads the company file, its own TurnEngine runs the turn, and a
recording provider answers from the script in reference.json and stores
each request as the original's OpenAI provider would send it (its
`_format_messages` / `_format_tools`).

The original needs Python 3.12; on an older interpreter its few 3.12-only
statements (`type X = ...` aliases, `def f[T](...)`) are rewritten while
loading, nothing else.

Usage: python original_turn.py --src DIR --reference reference.json
       --company company.yaml --iterations N --out requests.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import json
import re
import sys

TYPE_ALIAS = re.compile(r"^(\s*)type (\w+)\s*=\s*(.+)$", re.M)
GENERIC_DEF = re.compile(r"^(\s*)((?:async\s+)?def \w+)\[([^\]()]*)\]\(", re.M)


def _py311(text: str) -> str:
    if sys.version_info >= (3, 12):
        return text
    text = TYPE_ALIAS.sub(lambda m: f"{m[1]}{m[2]} = {m[3]!r}", text)

    def generic(m: re.Match[str]) -> str:
        names = [v.strip().split(":")[0].strip() for v in m[3].split(",")]
        typevars = "".join(
            f"{m[1]}{n} = __import__('typing').TypeVar({n!r})\n" for n in names
        )
        return f"{typevars}{m[1]}{m[2]}("

    return GENERIC_DEF.sub(generic, text)


class _Loader(importlib.machinery.SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):  # type: ignore[override]
        return compile(_py311(data.decode("utf-8")), path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, src: str) -> None:
        self.src = src

    def find_spec(self, name, path, target=None):
        if name != "crewlet" and not name.startswith("crewlet."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path or [self.src])
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            spec.loader = _Loader(name, spec.origin)
        return spec


def _phase_of(system: str) -> str:
    for marker, phase in (
        ("## PLAN phase", "plan"),
        ("## EXECUTE phase", "execute"),
        ("## REVIEW phase", "review"),
    ):
        if marker in system:
            return phase
    return "other"


async def _run(args: argparse.Namespace) -> dict:
    from crewlet.agent.definition import AgentDefinition
    from crewlet.agent.instance import AgentInstance
    from crewlet.agent.turn import TurnEngine
    from crewlet.config import load_organization
    from crewlet.providers.llm.openai import OpenAIProvider
    from crewlet.providers.llm.protocol import Completion, ToolCall
    from crewlet.tools.capabilities import ToolAnnotations
    from crewlet.tools.protocol import ToolResult
    from crewlet.tools.registry import SimpleTool, ToolRegistry

    with open(args.reference, encoding="utf-8") as f:
        ref = json.load(f)
    script = ref["script"]
    wire = OpenAIProvider(model="gpt-4.1-mini", api_keys=["bench-not-a-key"])
    requests: list[dict] = []

    class Recorder:
        model = "gpt-4.1-mini"

        def __init__(self) -> None:
            self.iteration = 0

        async def complete(
            self, messages, tools=None, temperature=0.7, max_tokens=None, tool_choice=None
        ):
            system = next((m.content for m in messages if m.role == "system"), "")
            phase = _phase_of(system)
            body: dict = {"model": self.model, "messages": wire._format_messages(messages)}
            body["temperature"] = temperature
            if max_tokens is not None:
                body["max_tokens"] = max_tokens
            if tools:
                body["tools"] = wire._format_tools(tools)
                body["tool_choice"] = tool_choice or "auto"
            answer = self._answer(phase, messages)
            requests.append(
                {
                    "iteration": self.iteration,
                    "phase": phase,
                    "body": body,
                    "completion": {
                        "content": answer.content,
                        "tool_calls": [
                            {"name": c.name, "arguments": json.dumps(c.arguments)}
                            for c in answer.tool_calls
                        ],
                    },
                }
            )
            return answer

        async def stream(self, *a, **kw):  # the turn engine falls back to complete
            raise NotImplementedError

        def _answer(self, phase: str, messages) -> Completion:
            if phase == "plan":
                return Completion(
                    tool_calls=[ToolCall(id="call_plan", name="submit_plan", arguments=script["plan"])]
                )
            if phase == "review":
                return Completion(
                    tool_calls=[
                        ToolCall(id="call_review", name="submit_review", arguments=script["review"])
                    ]
                )
            if phase == "execute":
                done = sum(1 for m in messages if m.role == "tool")
                if done < len(script["execute"]):
                    step = script["execute"][done]
                    return Completion(
                        tool_calls=[
                            ToolCall(id=f"call_{done}", name=step["tool"], arguments=step["arguments"])
                        ]
                    )
                return Completion(content=script["execute_final"])
            return Completion(content="")

    registry = ToolRegistry()
    for spec in ref["tools"]:
        output = spec["output"]

        async def run(params, ctx, output=output):
            return ToolResult(success=True, output=output)

        registry.register(
            SimpleTool(spec["name"], spec["description"], spec["parameters"], run),
            annotations=ToolAnnotations(read_only=spec["read_only"]),
        )

    class Queue:
        async def publish(self, topic, event):
            pass

        async def subscribe(self, topic, group, handler):
            pass

    org = load_organization(args.company)
    role = next((r for r in org.all_roles() if r.handle == ref["seat"]), None)
    if role is None:
        raise SystemExit(f"no seat with handle {ref['seat']!r} in {args.company}")
    recorder = Recorder()
    engine = TurnEngine(
        llm_providers={"default": recorder}, tool_registry=registry, event_queue=Queue()
    )
    trigger = ref["trigger"]
    for i in range(1, args.iterations + 1):
        recorder.iteration = i
        agent = AgentInstance(
            definition=AgentDefinition(role=role, org=org),
            handle=ref["seat"],
            email=f"{ref['seat']}@example.com",
        )
        agent.activate()
        await engine.run_turn(
            agent,
            task_id=f"task-{i}",
            task_description=trigger["content"],
            org=org,
        )
    return {"engine": "original", "requests": requests}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--company", required=True)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _Finder(args.src))
    import logging

    logging.disable(logging.CRITICAL)
    result = asyncio.run(_run(args))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
