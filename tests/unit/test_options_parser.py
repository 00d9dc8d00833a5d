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


def test_options_one_level_deep_are_parsed_once_and_no_caller_shares_them() -> None:
    parse, calls = counting_parser()
    text = '{"group": {"id": "a", "priority": 2}, "backoff": {"type": "fixed"}, "x": [1, 2]}'
    first = parse(text)
    first["group"]["id"] = "changed"
    first["x"].append(3)
    second = parse(text)
    assert second == {
        "group": {"id": "a", "priority": 2},
        "backoff": {"type": "fixed"},
        "x": [1, 2],
    }
    second["group"]["priority"] = 0
    assert parse(text)["group"] == {"id": "a", "priority": 2}
    assert len(calls) == 1


def test_deeper_options_are_parsed_once_per_call_so_no_caller_shares_them() -> None:
    parse, calls = counting_parser()
    text = '{"repeat": {"opts": {"every": 10}}}'
    first = parse(text)
    first["repeat"]["opts"]["every"] = 0
    assert parse(text) == {"repeat": {"opts": {"every": 10}}}
    assert len(calls) == 2  # no parse twice in one call, none shared


def test_more_texts_than_the_cache_holds_still_read_right() -> None:
    parse, calls = counting_parser()
    texts = [json.dumps({"group": {"id": str(i)}}) for i in range(3000)]
    for _round in range(2):
        for i, text in enumerate(texts):
            assert parse(text) == {"group": {"id": str(i)}}
    assert len(calls) == 2 * len(texts)  # each text once a round: the cache started over


def test_empty_options_need_no_parse() -> None:
    parse, calls = counting_parser()
    assert parse(None) == {} and parse("") == {} and parse("{}") == {}
    assert calls == []
