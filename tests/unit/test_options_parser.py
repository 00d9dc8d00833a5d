"""codec.options_parser: option texts many jobs share are parsed once, never shared."""

from __future__ import annotations

import json
from typing import Any

from psyq.rules import codec


def counting_parser() -> tuple[codec.OptionsParser, list[str]]:
    calls: list[str] = []

    def parse(text: str) -> dict[str, Any]:
        calls.append(text)
        parsed: dict[str, Any] = json.loads(text)
        return parsed

    return codec.options_parser(parse), calls


def test_flat_options_are_parsed_once_and_each_caller_gets_its_own_dict() -> None:
    parse, calls = counting_parser()
    first = parse('{"attempts": 3, "lifo": true}')
    first["attempts"] = 99
    second = parse('{"attempts": 3, "lifo": true}')
    assert second == {"attempts": 3, "lifo": True}
    assert second is not first
    assert len(calls) == 1


def test_nested_options_are_parsed_every_time_so_no_caller_shares_them() -> None:
    parse, calls = counting_parser()
    text = '{"backoff": {"type": "fixed", "delay": 10}}'
    first = parse(text)
    first["backoff"]["delay"] = 0
    assert parse(text) == {"backoff": {"type": "fixed", "delay": 10}}
    assert len(calls) == 3  # the first (cached as "not flat"), then every call parses


def test_empty_options_need_no_parse() -> None:
    parse, calls = counting_parser()
    assert parse(None) == {} and parse("") == {} and parse("{}") == {}
    assert calls == []
