"""The Lua scripts: read from `lua/<name>-<numKeys>.lua`, includes spliced in, loaded once
and run by EVALSHA (reloaded when the server answers NOSCRIPT, e.g. after a restart).

A script's header names the keys it touches (`-- KEYS: wait active ...`, suffixes of the
queue key); the loader passes exactly those as KEYS, so Redis Cluster and ACLs see them.
Every script gets the queue key prefix `<prefix>:<queue>:` as ARGV[1], bound to `P`.
`--@include a b` splices `lua/includes/a.lua` and `b.lua` in that order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

__all__ = ["Script", "load_scripts"]

PRELUDE = "local P = ARGV[1]\n"


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    key_suffixes: tuple[str, ...]
    source: str
    sha: str

    def keys(self, queue_key: str) -> list[str]:
        return [f"{queue_key}:{suffix}" for suffix in self.key_suffixes]

    async def run(self, client: Any, queue_key: str, *args: Any) -> Any:
        keys = self.keys(queue_key)
        argv = (f"{queue_key}:", *args)
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *argv)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *argv)


def _read(folder: Any, name: str) -> str:
    text: str = folder.joinpath(name).read_text(encoding="utf-8")
    return text


def _build(folder: Any, filename: str) -> Script:
    stem = filename.removesuffix(".lua")
    name, _, count = stem.rpartition("-")
    text = _read(folder, filename)
    suffixes: tuple[str, ...] = ()
    parts = [PRELUDE]
    for line in text.splitlines():
        if line.startswith("-- KEYS:"):
            listed = line.removeprefix("-- KEYS:").strip()
            suffixes = () if listed.startswith("(") else tuple(listed.split())
        elif line.startswith("--@include"):
            for include in line.split()[1:]:
                parts.append(_read(folder.joinpath("includes"), f"{include}.lua"))
    if len(suffixes) != int(count):
        raise RuntimeError(f"{filename}: header lists {len(suffixes)} keys, name says {count}")
    parts.append(text)
    source = "\n".join(parts)
    return Script(name, suffixes, source, hashlib.sha1(source.encode()).hexdigest())


def load_scripts() -> dict[str, Script]:
    """Every script of the package, by name (without the key count)."""
    folder = resources.files("psyq.backends.redis").joinpath("lua")
    scripts = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".lua"):
            script = _build(folder, entry.name)
            scripts[script.name] = script
    return scripts
