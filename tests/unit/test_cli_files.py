"""Files the commands write are replaced whole: never left half-written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from karpenter_core.cli import files
from karpenter_core.cli.files import write_atomically
from karpenter_core.cli.main import cli


def test_a_file_is_written_whole_with_the_usual_permissions(tmp_path: Path) -> None:
    target = tmp_path / "a.yaml"
    write_atomically(target, "kind: A\n")
    assert target.read_text(encoding="utf-8") == "kind: A\n"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    target.chmod(0o640)
    write_atomically(target, "kind: B\n")
    assert target.read_text(encoding="utf-8") == "kind: B\n"
    assert target.stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["a.yaml"]


def test_a_write_that_fails_half_way_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "a.yaml"
    target.write_text("old\n", encoding="utf-8")

    def full_disk(source: str, destination: Path) -> None:
        raise OSError(28, "No space left on device", source)

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(OSError) as raised:
        write_atomically(target, "new\n" * 1000)
    assert raised.value.filename == str(target)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["a.yaml"]


def test_crds_output_dir_stopped_half_way_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while writing the second CRD: the first is whole, the second absent, and the
    error is one line naming the file."""
    calls = []
    real_replace = os.replace

    def second_fails(source: str, destination: Path) -> None:
        calls.append(destination)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", source)
        real_replace(source, destination)

    monkeypatch.setattr(files.os, "replace", second_fails)
    result = CliRunner().invoke(cli, ["crds", "--core-only", "--output-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: cannot write {calls[1]}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(calls[0]).name]
    assert Path(calls[0]).read_text(encoding="utf-8").rstrip().endswith("status: {}")
