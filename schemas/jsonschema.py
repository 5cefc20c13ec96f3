"""Generate and check the JSON Schema files under ``schemas/json/`` (one per event).

``ebbtide schemas generate`` writes them; ``stale_files()`` lists those that differ from the
models, and a test fails when it is not empty.
"""

from __future__ import annotations

import json
from pathlib import Path

from schemas.base import Event
from schemas.topics import CATALOGUE

JSON_DIR = Path(__file__).parent / "json"


def events() -> dict[str, type[Event]]:
    found: dict[str, type[Event]] = {}
    for t in CATALOGUE:
        found[t.event.__name__] = t.event
    return dict(sorted(found.items()))


def render(event: type[Event]) -> str:
    schema = event.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"ebbtide/{event.__name__}/v1"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def expected_files() -> dict[Path, str]:
    return {JSON_DIR / f"{name}.json": render(cls) for name, cls in events().items()}


def write_all() -> list[Path]:
    JSON_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def stale_files() -> list[str]:
    stale = []
    for path, text in expected_files().items():
        if not path.exists():
            stale.append(f"{path.name}: missing")
        elif path.read_text() != text:
            stale.append(f"{path.name}: differs from the model")
    known = {p.name for p in expected_files()}
    stale.extend(f"{p.name}: no such event" for p in JSON_DIR.glob("*.json") if p.name not in known)
    return stale
