"""Handing decoded records to a stream service: a run of one topic's records in, outgoing events out.

Place in the loop: between consuming and producing, shared by the Kafka runtime
(:class:`streams.services.runtime.ServiceRuntime`) and the in-memory bus
(:class:`streams.memory_bus.MemoryBus`), so both decode, validate and dead-letter a record the
same way. :func:`handle_run` is pure of Kafka: it takes anything shaped like a consumed record
(:class:`streams.services.batch_decode.Record`) and returns what to produce, dead letters included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import ValidationError

from schemas.base import Event
from schemas.codec import DecodeError, describe
from schemas.topics import DEAD_LETTERS, Topic
from streams.services.batch_decode import BatchDecoder, Record, dead_letter

Outgoing = tuple[Topic, Event]


class Processor(Protocol):
    """A service. It may also define ``on_events(source, events) -> Iterable[Outgoing] | None``:
    a run of valid events of one topic at once (None: not handled, the runtime calls
    ``on_event`` for each). It must not raise for valid events, or be idempotent: on a
    ValueError the run is handed again one event at a time (each failure dead-lettered). It may
    define ``on_rewind()`` too: an output since the last commit was not delivered and the
    uncommitted inputs are about to be handed again, so it must answer them again."""

    name: str
    inputs: tuple[Topic, ...]

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]: ...

    def on_idle(self) -> Iterable[Outgoing]: ...

    def pending(self) -> bool: ...


@dataclass
class Handled:
    """What one run of records gave: the events to produce, in order, and how many were dead letters."""

    outputs: list[Outgoing] = field(default_factory=list)
    dead_lettered: int = 0

    def dead_letter(self, record: Record, reason: str, consumer: str) -> None:
        self.outputs.append((DEAD_LETTERS, dead_letter(record, reason, consumer)))
        self.dead_lettered += 1


def handle_run(
    processor: Processor,
    decoder: BatchDecoder,
    records: Sequence[Record],
    on_inputs: Callable[[list[Event]], None] | None = None,
) -> Handled:
    """Decode a run of one topic's records and hand the valid events to the processor.

    The topic's validator runs over the whole run; on the first bad record the run is decoded
    again one record at a time, so each bad record becomes a dead letter with its own reason.
    A clean run goes to ``on_events`` where the processor has it; otherwise (or when that raises
    ValueError) each event goes to ``on_event``, and an event it rejects is dead-lettered too.
    ``on_inputs`` sees the valid events (the runtime's metrics).
    """
    values = [record.value() for record in records]
    events = decoder.validate_all(values)
    results: list[Event | DecodeError]
    if events is None:  # at least one bad record: decode again one by one for the reasons
        results = decoder.decode_each(values)
        if on_inputs is not None:
            on_inputs([r for r in results if not isinstance(r, DecodeError)])
    else:
        results = list(events)
        if on_inputs is not None:
            on_inputs(events)
    if events is not None:
        bulk = _hand_in_bulk(processor, decoder.source, events)
        if bulk is not None:
            return Handled(outputs=list(bulk))
    return _hand_one_by_one(processor, decoder.source, records, results)


def _hand_in_bulk(processor: Processor, source: Topic, events: list[Event]) -> Iterable[Outgoing] | None:
    """The processor's ``on_events`` answer for a clean run, or None (absent, declined, or it raised)."""
    on_events = getattr(processor, "on_events", None)
    if on_events is None:
        return None
    try:
        out: Iterable[Outgoing] | None = on_events(source, events)
    except (ValueError, ValidationError):
        return None  # one of them is unusable here: hand them over one by one
    return out


def _hand_one_by_one(
    processor: Processor,
    source: Topic,
    records: Sequence[Record],
    results: Sequence[Event | DecodeError],
) -> Handled:
    handled = Handled()
    for record, result in zip(records, results, strict=True):
        if isinstance(result, DecodeError):
            handled.dead_letter(record, str(result), processor.name)
            continue
        try:
            handled.outputs.extend(processor.on_event(source, result) or ())
        except (ValueError, ValidationError) as exc:  # the event is valid but unusable here
            reason = describe(exc) if isinstance(exc, ValidationError) else str(exc)
            handled.dead_letter(record, f"{source.event.__name__}: {reason}", processor.name)
    return handled
