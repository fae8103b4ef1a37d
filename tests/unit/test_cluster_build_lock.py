"""Two control-plane builds at once take turns on the cache's lock, and the one that waits
says so and counts the wait in its total. The Kubernetes step is a quick fake (no Go)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from karpenter_conformance.cluster import build, versions

STEP_SECONDS = 0.7
DONE = re.compile(r"^\[build\] done in (\d+\.\d)s(?: \((\d+\.\d)s waiting for another build\))?;")


class FakeKubernetesStep:
    """Stands in for the Go build of the Kubernetes commands: writes them after a pause."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.calls = 0
        self.built: list[str] = []
        self.first: versions.KubernetesRelease | None = None

    def __call__(
        self,
        env: dict[str, str],
        work: Path,
        out: Path,
        log_file: Path,
        log: build.Log,
        commands: Sequence[str],
        first: versions.KubernetesRelease | None,
    ) -> tuple[versions.KubernetesRelease, float, list[str]]:
        self.calls += 1
        self.built += commands
        self.first = first
        self.running.set()
        time.sleep(STEP_SECONDS)
        for name in commands:
            (out / name).write_text("")
        return versions.KUBERNETES, STEP_SECONDS, []


@pytest.fixture
def step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKubernetesStep:
    """A cache holding everything but the Kubernetes commands, and the fake step for them."""
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(build, "go_env", lambda: dict(os.environ))
    monkeypatch.setattr(build, "_local_go_version", lambda env: "1.26.0")
    fake = FakeKubernetesStep()
    monkeypatch.setattr(build, "_build_kubernetes", fake)
    build.bin_dir().mkdir(parents=True)
    for name in ("etcd", "kwok", "helm"):
        (build.bin_dir() / name).write_text("")
    fallback = versions.KUBERNETES_FALLBACKS[0]
    manifest = {"helm": versions.HELM, "kubernetes": fallback.version, "staging": fallback.staging}
    (build.cache_dir() / build.MANIFEST_FILE).write_text(json.dumps(manifest))
    build.stages_path().write_text("")
    return fake


def _contend(step: FakeKubernetesStep) -> tuple[list[str], list[str]]:
    """Start one build; once it builds, start a second. Return both builds' log lines."""
    first: list[str] = []
    errors: list[BaseException] = []

    def run_first() -> None:
        try:
            build.build(log=first.append)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run_first)
    thread.start()
    assert step.running.wait(10), "the first build never reached its build step"
    second: list[str] = []
    build.build(log=second.append)
    thread.join(10)
    assert not errors
    return first, second


def test_a_build_waiting_for_another_says_so_and_counts_the_wait(
    step: FakeKubernetesStep,
) -> None:
    first, second = _contend(step)
    lock = build.cache_dir() / "build.lock"

    assert step.calls == 1, "the second build found the binaries built and built nothing"
    assert build.is_built()
    assert second[0] == f"[build] waiting for another build holding {lock} (pid {os.getpid()})..."
    assert len(second) == 2, second
    done = DONE.match(second[-1])
    assert done and done[2], second[-1]
    total, waited = float(done[1]), float(done[2])
    assert STEP_SECONDS / 2 <= waited <= total

    assert not any("waiting for another build" in line for line in first)
    first_done = DONE.match(first[-1])
    assert first_done and float(first_done[1]) >= STEP_SECONDS


def test_a_long_wait_is_reported_again(
    step: FakeKubernetesStep, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "WAIT_REPORT_SECONDS", STEP_SECONDS / 4)
    _, second = _contend(step)
    again = [line for line in second if line.startswith("[build] still waiting for another build")]
    assert len(again) >= 2, second
    assert all(re.search(r" \(\d+\.\ds so far\)$", line) for line in again)


def test_the_lock_names_no_holder_once_released(step: FakeKubernetesStep) -> None:
    lines: list[str] = []
    build.build(log=lines.append)
    assert (build.cache_dir() / "build.lock").read_text() == ""
    assert not any("waiting for another build" in line for line in lines)


def test_only_the_missing_kubernetes_commands_are_built(step: FakeKubernetesStep) -> None:
    for name in build.KUBERNETES_COMMANDS:
        if name != "kubectl":
            (build.bin_dir() / name).write_text("")
    assert not build.is_built()
    build.build(log=lambda line: None)
    assert step.built == ["kubectl"]
    assert step.first == versions.KUBERNETES_FALLBACKS[0], "kubectl of the cached release"
    assert build.is_built()
    assert build.read_manifest()["helm"] == versions.HELM
