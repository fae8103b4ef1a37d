"""The crash points the resilience tests arm: a crash point kills the process only when armed
with its own name, and the setting accepts only the crash points there are."""

from __future__ import annotations

import os
import signal

import pytest

from karpenter_core.operator.crashpoints import CRASH_AFTER_LAUNCH, crash_point
from karpenter_core.operator.settings import Settings, SettingsError


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


def test_an_unarmed_crash_point_does_nothing(kills: list[tuple[int, int]]) -> None:
    crash_point(CRASH_AFTER_LAUNCH, "")
    assert kills == []


def test_an_armed_crash_point_sigkills_the_process(
    kills: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    crash_point(CRASH_AFTER_LAUNCH, CRASH_AFTER_LAUNCH)
    assert kills == [(os.getpid(), signal.SIGKILL)]
    assert f"test crash point {CRASH_AFTER_LAUNCH}: killing the process" in caplog.messages


def test_another_crash_point_armed_does_nothing(kills: list[tuple[int, int]]) -> None:
    crash_point("before-something-else", CRASH_AFTER_LAUNCH)
    assert kills == []


def test_the_setting_takes_only_known_crash_points() -> None:
    armed = Settings.load(env={"KARPENTER_TEST_CRASH_POINT": CRASH_AFTER_LAUNCH})
    assert armed.test_crash_point == CRASH_AFTER_LAUNCH
    with pytest.raises(SettingsError, match="KARPENTER_TEST_CRASH_POINT: 'later' is not a crash"):
        Settings.load(env={"KARPENTER_TEST_CRASH_POINT": "later"})
