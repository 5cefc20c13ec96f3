"""Metric names a PromQL expression selects, by a real PromQL parser (promql-parser), for the checks
that every dashboard query and alert rule names a metric streams/metric_families.py declares."""

from __future__ import annotations

import re

import promql_parser

# Series Prometheus itself makes (not exported by any ebbtide process).
PROMETHEUS_SERIES = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"})

_GRAFANA_DURATIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]+\}|\$[A-Za-z_]\w*|\[\[[^\]]+\]\]")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.+),\s*[A-Za-z_]\w*\s*\)\s*$")


def substitute_grafana_variables(expr: str) -> str:
    """Grafana's $__rate_interval etc. become durations; other $variables (label values) a word."""
    for variable, duration in _GRAFANA_DURATIONS.items():
        expr = expr.replace(variable, duration)
    return _GRAFANA_VARIABLE.sub("x", expr)


def metric_names(expr: str) -> set[str]:
    """Names of every vector selector in ``expr``; raises ValueError when it does not parse."""
    tree = promql_parser.parse(substitute_grafana_variables(expr))
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                for matcher in node.matchers.matchers:
                    if matcher.name == "__name__":
                        names.add(matcher.value)

    promql_parser.walk(tree, pre_visit=visit)
    return names


def template_query_names(query: str) -> set[str]:
    """Metric names of a Grafana template query: ``label_values(selector, label)`` or plain PromQL."""
    match = _LABEL_VALUES.match(query)
    return metric_names(match.group("selector") if match else query)
