"""The in-memory bus: the stream services run together without a broker (house style 12).

Place in the loop: the broker's stand-in, for tests and quick runs of the whole loop. Each topic
of the catalogue (:mod:`schemas.topics`) is an ordered in-memory log. A record goes on as bytes
(:func:`schemas.codec.encode`) and comes off through the runtime's own decoding
(:func:`streams.services.dispatch.handle_run`), so a record that does not decode, or that a
service rejects, lands on the dead-letter topic with its reason exactly as over Kafka.

:meth:`MemoryBus.run` goes round the processors in turn: each is handed every record of its
input topics written since its last turn, in the order written (runs of one topic together, as
a fetch delivers them), then its ``on_idle``; what it returns is written to the logs. Rounds go
on until one moves nothing (quiescent). The collector is a producer only: feed its GpuSamples,
and the cluster's job events and demand, with :meth:`MemoryBus.publish`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

from schemas.base import Event
from schemas.codec import DecodeError, decode, encode
from schemas.topics import CATALOGUE, Topic
from streams.services.batch_decode import BatchDecoder
from streams.services.dispatch import Outgoing, Processor, handle_run


class MemoryRecord:
    """One record on a log, shaped like confluent-kafka's ``Message`` (one partition per topic)."""

    __slots__ = ("_key", "_offset", "_topic", "_value")

    def __init__(self, topic: str, offset: int, key: bytes | None, value: bytes | None) -> None:
        self._topic, self._offset, self._key, self._value = topic, offset, key, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


@dataclass
class BusStats:
    """Per processor, as the runtime counts them."""

    consumed: int = 0
    produced: int = 0
    dead_lettered: int = 0


class NotQuiescent(RuntimeError):
    """The processors kept producing for more rounds than allowed."""


class MemoryBus:
    def __init__(self, processors: Sequence[Processor], topics: Iterable[Topic] = CATALOGUE) -> None:
        names = [p.name for p in processors]
        if len(set(names)) != len(names):
            raise ValueError(f"processor names must differ: {names}")
        self.processors = list(processors)
        self.logs: dict[str, list[MemoryRecord]] = {t.name: [] for t in topics}
        self.stats = {p.name: BusStats() for p in processors}
        self._written: list[MemoryRecord] = []  # every record, in the order written
        self._read_up_to = {p.name: 0 for p in processors}
        self._decoders = {p.name: {t.name: BatchDecoder(t) for t in p.inputs} for p in processors}

    # ---- writing and reading ---------------------------------------------------------------

    def publish(self, topic: Topic, events: Iterable[Event]) -> int:
        """Write events to ``topic`` as a producer would (key and value encoded); how many."""
        count = 0
        for event in events:
            key = getattr(event, "key", None)
            self.publish_raw(topic, encode(event), key.encode() if key else None)
            count += 1
        return count

    def publish_raw(self, topic: Topic, value: bytes | None, key: bytes | None = None) -> MemoryRecord:
        """Write raw bytes (a record no codec checked: how a malformed one gets on a topic)."""
        log = self.logs[topic.name]
        record = MemoryRecord(topic.name, len(log), key, value)
        log.append(record)
        self._written.append(record)
        return record

    def read(self, topic: Topic, strict: bool = True) -> list[Event]:
        """Every event on ``topic`` so far, decoded. A record that does not decode raises
        DecodeError, or with ``strict=False`` is left out (as the services dead-letter it)."""
        events = []
        for record in self.logs[topic.name]:
            try:
                events.append(decode(topic.event, record.value()))
            except DecodeError:
                if strict:
                    raise
        return events

    # ---- running ---------------------------------------------------------------------------

    def run(self, max_rounds: int = 100) -> int:
        """Turn the processors until a round moves nothing; the number of rounds that moved."""
        for rounds in range(max_rounds):
            moved = [self.turn(processor) for processor in self.processors]
            if not any(moved):
                return rounds
        raise NotQuiescent(f"still producing after {max_rounds} rounds")

    def turn(self, processor: Processor) -> bool:
        """Hand one processor its unread records, then its timers; whether anything moved."""
        start, end = self._read_up_to[processor.name], len(self._written)
        self._read_up_to[processor.name] = end
        decoders = self._decoders[processor.name]
        unread = [r for r in self._written[start:end] if r.topic() in decoders]
        stats = self.stats[processor.name]
        stats.consumed += len(unread)
        produced = 0
        for name, run in groupby(unread, key=MemoryRecord.topic):
            handled = handle_run(processor, decoders[name], list(run))
            stats.dead_lettered += handled.dead_lettered
            produced += self._route(handled.outputs)
        produced += self._route(processor.on_idle())
        stats.produced += produced
        return bool(unread) or produced > 0

    def _route(self, outputs: Iterable[Outgoing]) -> int:
        count = 0
        for topic, event in outputs:
            count += self.publish(topic, [event])
        return count


__all__ = ["BusStats", "MemoryBus", "MemoryRecord", "NotQuiescent"]
