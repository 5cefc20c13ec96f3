"""When a repeated decision is news on Kubernetes (actuators/kube/events.py ``in_words``): a reason
whose figures moved is the same decision in words; one whose words changed is a new one. No API
server: the Event itself is checked against a real one in test_kube_decisions.py."""

from __future__ import annotations

from actuators.kube.events import in_words


def test_figures_moving_is_the_same_decision_in_words() -> None:
    step1 = "run: keeps running in pool h100 (8 GPUs, weight 1, class standard); 107.3 GPU-h left"
    step2 = "run: keeps running in pool h100 (8 GPUs, weight 1, class standard); 105.3 GPU-h left"
    assert step1 != step2 and in_words(step1) == in_words(step2)
    held1 = "held: pool g2 is reserved for inference from 21:15 until 21:45 (forecast p90 = 20.8 GPUs now)"
    held2 = "held: pool g2 is reserved for inference from 21:30 until 22:00 (forecast p90 = 19.7 GPUs now)"
    assert in_words(held1) == in_words(held2)


def test_changed_words_are_a_new_decision() -> None:
    held = "held: pool g2 is reserved for inference from 21:15 until 21:45"
    planned = "held: planned to start at 23:15 in pool g2"
    assert in_words(held) != in_words(planned)
    assert in_words("run: starts in pool a") != in_words("run: keeps running in pool a")
