"""The local-cluster command line: where ``--state-dir`` may go (no cluster needed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from karpenter_conformance.cluster import __main__ as cluster_cli


@pytest.mark.parametrize("command", ["up", "down", "env"])
@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_state_dir_goes_before_or_after_the_subcommand(command: str, before: bool) -> None:
    argv = ["--state-dir", "/tmp/s", command] if before else [command, "--state-dir", "/tmp/s"]
    args = cluster_cli.parser().parse_args(argv)
    assert (args.command, args.state_dir) == (command, Path("/tmp/s"))


def test_state_dir_after_the_subcommand_wins() -> None:
    args = cluster_cli.parser().parse_args(["--state-dir", "/tmp/a", "up", "--state-dir", "/tmp/b"])
    assert args.state_dir == Path("/tmp/b")


@pytest.mark.parametrize("command", ["up", "down", "env", "build"])
def test_no_state_dir_means_the_default(command: str) -> None:
    assert cluster_cli.parser().parse_args([command]).state_dir is None


def test_up_takes_its_own_options_with_the_state_dir() -> None:
    args = cluster_cli.parser().parse_args(["up", "--state-dir", "/tmp/s", "--no-crds"])
    assert (args.state_dir, args.no_crds) == (Path("/tmp/s"), True)


def test_down_and_env_use_a_state_dir_given_after_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    assert cluster_cli.main(["down", "--state-dir", str(state)]) == 0
    assert capsys.readouterr().err == f"no control plane was running from {state}\n"
    assert cluster_cli.main(["env", "--state-dir", str(state)]) == 1
    assert capsys.readouterr().err == f"error: no control plane runs from {state}; run `up`\n"


def test_up_applies_the_crds_of_every_installed_provider(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Providers come from their entry points (an out-of-tree one has no providers/ folder)."""
    from pydantic import BaseModel

    from karpenter_core.cloudprovider import registry
    from karpenter_core.cloudprovider.plugin import NodeClassInfo

    class ExampleNodeClass(BaseModel):
        spec: dict[str, str] = {}

    info = NodeClassInfo(
        model=ExampleNodeClass,
        group="example.dev",
        version="v1",
        kind="ExampleNodeClass",
        plural="examplenodeclasses",
    )
    records = {"example": SimpleNamespace(node_classes=(info,))}
    monkeypatch.setattr(registry, "discover", lambda: SimpleNamespace(records=records))
    started: list[list[str]] = []

    class Plane:
        def __init__(self, state_dir: Path) -> None:
            self.kubeconfig = state_dir / "kubeconfig"

        def start(self, documents: list[dict[str, Any]]) -> float:
            started.append([d["metadata"]["name"] for d in documents])
            return 0.0

        def describe(self) -> dict[str, tuple[int, Path]]:
            return {}

    monkeypatch.setattr(cluster_cli.control_plane, "ControlPlane", Plane)
    monkeypatch.chdir(tmp_path)  # not inside the project: nothing may come from its folders
    assert cluster_cli.main(["up", "--state-dir", str(tmp_path)]) == 0
    assert started == [
        ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "examplenodeclasses.example.dev"]
    ]
