"""Command line: ``python -m karpenter_conformance.cluster build|up|down|env``."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from karpenter_conformance.cluster import build, control_plane, crds


def _state_dir(args: argparse.Namespace) -> Path:
    return args.state_dir or control_plane.default_state_dir()


def _build(args: argparse.Namespace) -> None:
    if build.is_built() and not args.force:
        print(f"already built: {build.bin_dir()} ({build.read_manifest().get('kubernetes')})")
        return
    result = build.build(force=args.force)
    print(f"built kubernetes {result.kubernetes.version} into {result.bin_dir}")


def _up(args: argparse.Namespace) -> None:
    if args.no_crds:
        documents: list[dict[str, Any]] = []
    elif args.crd_dir:
        documents = crds.load(control_plane.crd_files_in(args.crd_dir))
    else:
        documents = control_plane.installed_crds()
    cluster = control_plane.ControlPlane(_state_dir(args))
    seconds = cluster.start(documents)
    for name, (pid, log) in cluster.describe().items():
        print(f"{name:<24} pid {pid:<8} log {log}", file=sys.stderr)
    print(f"{len(documents)} CRD(s) applied; control plane up in {seconds:.1f}s", file=sys.stderr)
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}")


def _down(args: argparse.Namespace) -> None:
    cluster = control_plane.ControlPlane(_state_dir(args))
    running = cluster.running_components()
    cluster.stop()
    if running:
        print("control plane stopped", file=sys.stderr)
    else:
        print(f"no control plane was running from {cluster.state_dir}", file=sys.stderr)


def _env(args: argparse.Namespace) -> None:
    cluster = control_plane.ControlPlane(_state_dir(args))
    if not cluster.running_components():
        raise control_plane.ClusterError(
            f"no control plane runs from {cluster.state_dir}; run `up`"
        )
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}")


def _add_state_dir(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default,
        help=f"runtime files (default: ${control_plane.STATE_ENV} "
        "or ~/.cache/karpenter-py/cluster/run)",
    )


def parser() -> argparse.ArgumentParser:
    """The command line; ``--state-dir`` goes before or after the subcommand."""
    top = argparse.ArgumentParser(
        prog="python -m karpenter_conformance.cluster",
        description="Build and run a local Kubernetes control plane with KWOK.",
    )
    _add_state_dir(top, None)
    commands = top.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build and cache the binaries")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even if cached")
    build_cmd.set_defaults(run=_build)
    up_cmd = commands.add_parser("up", help="start the control plane and apply CRDs")
    up_cmd.add_argument(
        "--crd-dir",
        type=Path,
        action="append",
        help="directory of CRD YAML to apply (repeatable; default: the core's CRDs and those "
        "of every installed provider)",
    )
    up_cmd.add_argument("--no-crds", action="store_true", help="apply no CRDs")
    up_cmd.set_defaults(run=_up)
    down_cmd = commands.add_parser("down", help="stop the control plane")
    down_cmd.set_defaults(run=_down)
    env_cmd = commands.add_parser("env", help="print the KUBECONFIG export")
    env_cmd.set_defaults(run=_env)
    for command in (up_cmd, down_cmd, env_cmd):
        # Absent after the subcommand, the option keeps what was given before it.
        _add_state_dir(command, argparse.SUPPRESS)
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except (build.BuildError, control_plane.ClusterError, crds.CrdError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
