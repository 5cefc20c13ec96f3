"""Hostile documents drawn from the contracts' JSON Schemas (schemas/json), for the fuzz tier.

A seeded walker over one event's JSON Schema (the files ``ebbtide schemas generate`` writes): every
value it draws satisfies the schema, and leans to the hostile end of it: numbers at their minimum,
maximum or just inside an exclusive bound, strings of the longest allowed length or holding
``/``, ``%`` and non-ASCII, empty and long arrays, optional fields absent or null, dates at the
contract's earliest and latest (``x-earliest``/``x-latest``). ``hints`` name values by property
name (clusters, pools, jobs, services, times near a test's clock): the references a service checks
are then sometimes known, sometimes not; a ``fixup`` may tie fields together (a spec's job id to
the event's, the test's own curves) after the walker's draw was checked against the schema.
:func:`malformed` turns a document into bytes no consumer may take.

hypothesis-jsonschema (0.23.1, the latest release) was tried first: with hypothesis 6.170 its
strategies fail (``'many' object has no attribute 'more'``), and it cannot resolve the ``$id``-based
``$ref``s of these files; so the fuzz tier draws its documents with this walker.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas" / "json"
Hint = Callable[[random.Random], Any]
HINT_SHARE = 0.85
"""How often a hinted property takes its hint rather than a value drawn from the schema alone."""
MAX_ARRAY = 12
CHECK_FIRST = 50
CHECK_EVERY = 10
PATTERN_SAMPLES = {
    "^p\\d{1,2}(\\.\\d+)?$": ["p50", "p90", "p99", "p1", "p99.9", "p0"],
    "^(service/[^/]+/[^/]+|(job|plan|reservation)/[^/]+)$": ["job/j1", "plan/p", "service/chat/a100"],
}
ODD_TEXT = ["a/b", "100%", "ünïcødé", " ", "x" * 64, "\\u0000-free"]


def load_schema(event: str) -> dict[str, Any]:
    return dict(json.loads((SCHEMA_DIR / f"{event}.json").read_text()))


def iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


class SchemaFuzzer:
    """Draws hostile documents valid against one event's JSON Schema."""

    def __init__(
        self,
        event: str,
        rng: random.Random,
        hints: dict[str, Hint] | None = None,
        fixup: Callable[[random.Random, dict[str, Any]], None] | None = None,
    ) -> None:
        self.schema = load_schema(event)
        self.fixup = fixup
        self.drawn = 0
        self.validator = Draft202012Validator(self.schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        self.rng = rng
        self.hints = hints or {}

    def document(self) -> dict[str, Any]:
        """One document. The walker's draws, the first :data:`CHECK_FIRST` and every
        :data:`CHECK_EVERY`-th after, are checked against the schema (AssertionError if it drew
        something the schema refuses; checking every one would cost more than the fuzzing); the
        ``fixup`` runs after the check."""
        doc = self._value(self.schema, None)
        if self.drawn < CHECK_FIRST or self.drawn % CHECK_EVERY == 0:
            error = next(iter(self.validator.iter_errors(doc)), None)
            assert error is None, f"the walker drew an invalid document: {error.message}"
        self.drawn += 1
        if self.fixup is not None:
            self.fixup(self.rng, doc)  # the test's own values, tying fields together
        return dict(doc)

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        if ref is None:
            return node
        assert ref.startswith("#/$defs/"), ref
        return dict(self.schema["$defs"][ref.removeprefix("#/$defs/")])

    def _value(self, node: dict[str, Any], name: str | None) -> Any:
        node = self._resolve(node)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return self.rng.choice(node["enum"])
        if "anyOf" in node:
            return self._value(self.rng.choice(node["anyOf"]), name)
        kind = node.get("type")
        if kind == "object":
            return self._object(node)
        if kind == "array":
            size = self.rng.choice([0, 1, 2, self.rng.randrange(MAX_ARRAY + 1)])
            size = max(size, node.get("minItems", 0))
            return [self._value(node.get("items", {}), name) for _ in range(size)]
        if kind == "string":
            return self._string(node)
        if kind in ("number", "integer"):
            return self._number(node, kind == "integer")
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        raise AssertionError(f"schema node the walker does not know: {sorted(node)}")

    def _object(self, node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        required = set(node.get("required", ()))
        for prop, sub in node.get("properties", {}).items():
            if prop not in required and self.rng.random() < 0.4:
                continue  # optional: absent, its default applies
            hint = self.hints.get(prop)
            if hint is not None and self.rng.random() < HINT_SHARE:
                out[prop] = hint(self.rng)
            else:
                out[prop] = self._value(sub, prop)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            names = node.get("propertyNames", {})
            for _ in range(self.rng.choice([0, 1, 3])):
                key = self._string(self._resolve(names)) if names else self._string({"minLength": 1})
                out[key] = self._value(extra, key)
        return out

    def _string(self, node: dict[str, Any]) -> str:
        if node.get("format") == "date-time":
            earliest, latest = node.get("x-earliest"), node.get("x-latest")
            return str(self.rng.choice([earliest, latest, "2026-01-05T00:00:00Z"]))
        pattern = node.get("pattern")
        if pattern is not None:
            return str(self.rng.choice(PATTERN_SAMPLES[pattern]))
        low, high = node.get("minLength", 0), node.get("maxLength", 300)
        text = self.rng.choice([*ODD_TEXT, "x" * high, "y" * max(low, 1)])
        if len(text) < low:
            text = text + "z" * (low - len(text))
        return text[:high]

    def _number(self, node: dict[str, Any], integer: bool) -> int | float:
        low = node.get("minimum", node.get("exclusiveMinimum"))
        high = node.get("maximum", node.get("exclusiveMaximum"))
        low = -1e15 if low is None else low
        high = 1e15 if high is None else high
        if "exclusiveMinimum" in node:
            low = low + 1 if integer else math.nextafter(low, math.inf)
        if "exclusiveMaximum" in node:
            high = high - 1 if integer else math.nextafter(high, -math.inf)
        choices = [low, high, 0, 1, self.rng.uniform(low, high)]
        value = min(max(self.rng.choice(choices), low), high)
        return int(value) if integer else float(value)


def malformed(rng: random.Random, document: dict[str, Any]) -> bytes:
    """Bytes no consumer may take: not JSON, not UTF-8, a field out of its range, an unknown field."""
    broken = dict(document)
    choice = rng.randrange(5)
    if choice == 0:
        return rng.randbytes(rng.randrange(1, 40))
    if choice == 1:
        return b"\xff\xfe" + json.dumps(broken).encode()
    if choice == 2:
        broken["schema_version"] = 99
    elif choice == 3:
        broken["cluster"] = 10**12
    else:
        broken["surprise"] = 1e20
    return json.dumps(broken).encode()
