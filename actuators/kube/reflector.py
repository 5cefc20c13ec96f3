"""List + watch of one kind of Kubernetes object, resumed by resourceVersion (client-go's Reflector).

Place in the loop: the Kubernetes source (actuators/kube/source.py) runs one :class:`Reflector`
per kind it follows (Jobs per namespace, JobSets, Pods, Nodes, Deployments, HPAs, PriorityClasses),
each on its own thread, feeding an in-memory view. The cycle:

1. list (raw JSON, no model deserialisation) and hand every item to ``replace``; remember the
   list's resourceVersion;
2. watch from that resourceVersion (with bookmarks) and hand each ADDED / MODIFIED / DELETED
   object to ``apply``, remembering each event's resourceVersion; a watch that ends (its server
   timeout) is reopened from the last one;
3. a watch answered 410 Gone (the version is older than etcd's compaction) relists from step 1;
4. any other failure (connection refused, 5xx, 403) waits with capped exponential backoff and
   retries: the watch from the last version, the list if none; after ``relist_after_failures``
   failures in a row it relists anyway (what it missed meanwhile is in the list).

A 404 on the list (a CRD such as JobSets not installed) is not an error: the kind is idle and
retried after the longest backoff.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

ListCall = Callable[..., Any]


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.2
    max_s: float = 10.0

    def delay(self, failures: int) -> float:
        return float(min(self.base_s * 2 ** max(failures - 1, 0), self.max_s))


@dataclass
class ReflectorStats:
    lists: int = 0
    relists_after_gone: int = 0
    watch_events: int = 0
    errors: int = 0
    last_error: str | None = None


@dataclass
class Reflector:
    """Keeps ``replace`` / ``apply`` up to date with one kind; ``synced`` is set after the first list."""

    name: str
    list_call: ListCall
    replace: Callable[[list[dict[str, Any]]], None]
    apply: Callable[[str, dict[str, Any]], None]
    label_selector: str | None = None
    field_selector: str | None = None
    watch_timeout_s: int = 240
    request_timeout_s: float = 30.0
    backoff: Backoff = field(default_factory=Backoff)
    relist_after_failures: int = 5
    synced: threading.Event = field(default_factory=threading.Event)
    stats: ReflectorStats = field(default_factory=ReflectorStats)
    resource_version: str | None = None
    _watch: watch.Watch | None = None

    def _selectors(self) -> dict[str, str]:
        out = {}
        if self.label_selector:
            out["label_selector"] = self.label_selector
        if self.field_selector:
            out["field_selector"] = self.field_selector
        return out

    def relist(self) -> None:
        resp = self.list_call(
            **self._selectors(), _preload_content=False, _request_timeout=self.request_timeout_s
        )
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        self.replace(list(body.get("items") or []))
        self.resource_version = str(body["metadata"]["resourceVersion"])
        self.stats.lists += 1
        self.synced.set()

    def watch_once(self, stop: threading.Event) -> None:
        """One watch from the last resourceVersion until the server closes it (or ``stop``)."""
        # return_type=object: events arrive as plain dicts (no model deserialisation), and an ERROR
        # event (410 Gone) is raised as ApiException (with deserialize=False the client's own
        # handling of ERROR events fails with KeyError 'raw_object').
        self._watch = watch.Watch(return_type=object)  # type: ignore[no-untyped-call]
        stream = self._watch.stream(  # type: ignore[no-untyped-call]
            self.list_call,
            **self._selectors(),
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=self.watch_timeout_s + self.request_timeout_s,
        )
        for event in stream:
            if stop.is_set():
                break
            kind, obj = event["type"], event["object"]
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind != "BOOKMARK":
                self.apply(kind, obj)
                self.stats.watch_events += 1
            if version:
                self.resource_version = str(version)

    def run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once(stop)
                failures = 0
            except ApiException as exc:
                if exc.status == 410:
                    self.resource_version = None
                    self.stats.relists_after_gone += 1
                    continue
                failures = self._failed(stop, failures, f"HTTP {exc.status} {exc.reason}", exc.status == 404)
            except (urllib3.exceptions.HTTPError, OSError, ValueError, KeyError) as exc:
                failures = self._failed(stop, failures, f"{type(exc).__name__}: {exc}", False)

    def _failed(self, stop: threading.Event, failures: int, why: str, absent: bool) -> int:
        if stop.is_set():
            return failures
        self.stats.errors += 1
        self.stats.last_error = why
        failures += 1
        if failures >= self.relist_after_failures:
            self.resource_version = None
        delay = self.backoff.max_s if absent else self.backoff.delay(failures)
        if absent:
            self.synced.set()  # nothing to list: the kind is not served here
        else:
            log.warning("kubernetes %s: %s; retrying in %.1f s", self.name, why, delay)
        stop.wait(delay)
        return failures

    def interrupt(self) -> None:
        """Close the open watch so ``run`` sees its stop flag now rather than at the next event."""
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]
            resp = getattr(current, "_resp", None)
            if resp is not None:
                with contextlib.suppress(Exception):
                    resp.close()


__all__ = ["Backoff", "Reflector", "ReflectorStats"]
