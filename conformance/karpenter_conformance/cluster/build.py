"""Build the control-plane binaries from Go modules, once per pinned version set.

Binaries, wrapper modules, build logs and the assembled KWOK stages live in a cache
directory outside the repository (``~/.cache/karpenter-py/cluster/<versions-key>`` or
``$KARPENTER_CLUSTER_CACHE/<versions-key>``); nothing here is ever committed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from karpenter_conformance.cluster import versions
from karpenter_conformance.cluster.logs import tail

CACHE_ENV = "KARPENTER_CLUSTER_CACHE"
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
ALL_BINARIES = ("etcd", "kwok", "helm", *KUBERNETES_COMMANDS)
STAGES_FILE = "kwok-stages.yaml"
MANIFEST_FILE = "versions.json"
# How the go command reports a module version the proxy will not serve.
_REFUSAL = re.compile(r"(\S+@v\S+): reading \S+: (?:403 Forbidden|404 Not Found|410 Gone)")
_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/src/", re.MULTILINE)

# How often a build waiting for another build's lock says it still waits.
WAIT_REPORT_SECONDS = 60.0
_LOCK_POLL_SECONDS = 0.2

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """A build step failed; the message says which and why."""


class ModulesRefused(BuildError):
    """The module proxy refused modules a build needs (listed in ``refusals``)."""

    def __init__(self, message: str, refusals: list[str]):
        super().__init__(message)
        self.refusals = refusals


@dataclass
class BuildResult:
    """What a build produced: the Kubernetes release used and seconds per step."""

    bin_dir: Path
    kubernetes: versions.KubernetesRelease
    seconds: dict[str, float] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)


def cache_root() -> Path:
    """Root of the binary cache (``$KARPENTER_CLUSTER_CACHE`` or ``~/.cache/...``)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "karpenter-py" / "cluster"


def cache_dir() -> Path:
    """Cache directory of the pinned version set."""
    return cache_root() / versions.versions_key()


def bin_dir() -> Path:
    """Directory holding the built binaries."""
    return cache_dir() / "bin"


def stages_path() -> Path:
    """Path of the KWOK stage definitions assembled at build time."""
    return cache_dir() / STAGES_FILE


def is_built() -> bool:
    """True when every binary and the KWOK stages are in the cache."""
    return stages_path().is_file() and all((bin_dir() / name).is_file() for name in ALL_BINARIES)


def read_manifest() -> dict[str, Any]:
    """Versions and timings recorded by the last successful build."""
    path = cache_dir() / MANIFEST_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _format_seconds(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"


def go_env() -> dict[str, str]:
    """This environment set for module builds: the local toolchain only, no cgo."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the Go toolchain is not on PATH; install Go >= 1.26 to build the local control "
            "plane, or run the tests with --cluster-backend external"
        )
    env = dict(os.environ)
    # Never let the go command fetch another toolchain behind our back.
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    env.pop("GOFLAGS", None)
    return env


def _go_json(args: Sequence[str], env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """Run a go command printing a stream of JSON objects and decode them."""
    proc = subprocess.run(
        ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    decoder = json.JSONDecoder()
    text, objects, pos = proc.stdout, [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        obj, pos = decoder.raw_decode(text, pos)
        objects.append(obj)
    if not objects and proc.returncode != 0:
        raise BuildError(f"`go {' '.join(args)}` failed:\n{proc.stderr.strip()}")
    return objects


class GoJob:
    """One go command running in the background, its output in a log file."""

    def __init__(self, name: str, args: Sequence[str], cwd: Path, env: dict[str, str], log: Path):
        self.name = name
        self.log = log
        self.args = list(args)
        self._started = time.monotonic()
        with log.open("w") as out:
            out.write(f"$ go {' '.join(self.args)}\n")
            out.flush()
            self._proc = subprocess.Popen(
                ["go", *self.args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        """Kill the command if it is still running."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def wait(self) -> float:
        """Wait for the command; return its wall time or raise with the log's tail."""
        code = self._proc.wait()
        elapsed = time.monotonic() - self._started
        if code != 0:
            message = (
                f"building {self.name} failed (exit {code}); last lines of {self.log}:\n"
                f"{tail(self.log)}"
            )
            refusals = sorted(set(_REFUSAL.findall(self.log.read_text(errors="replace"))))
            raise ModulesRefused(message, refusals) if refusals else BuildError(message)
        return elapsed


def _local_go_version(env: dict[str, str]) -> str:
    """Version of the go command on PATH, e.g. ``1.26.8``."""
    out = subprocess.run(
        ["go", "env", "GOVERSION"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    return out.removeprefix("go")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _kubernetes_go_mod(
    release: versions.KubernetesRelease, go_version: str, staging: list[str]
) -> str:
    replaces = "\n".join(f"\t{module} => {module} {release.staging}" for module in staging)
    return (
        "module example.local/karpenter-kubernetes-bin\n\n"
        f"go {go_version}\n\n"
        f"require {versions.KUBERNETES_MODULE} {release.version}\n\n"
        f"replace (\n{replaces}\n)\n"
    )


def _etcd_go_mod(go_version: str) -> str:
    return (
        "module example.local/karpenter-etcd-bin\n\n"
        f"go {go_version}\n\n"
        f"require {versions.ETCD_MODULE} {versions.ETCD}\n"
    )


def _build_kubernetes(
    env: dict[str, str],
    work: Path,
    out: Path,
    log_file: Path,
    log: Log,
    commands: Sequence[str] = KUBERNETES_COMMANDS,
    first: versions.KubernetesRelease | None = None,
) -> tuple[versions.KubernetesRelease, float, list[str]]:
    """Build ``commands`` of the pinned Kubernetes release (else of a fallback) in one go build;
    ``first`` (the release the cached commands came from) is tried before the others.

    Returns the release built, the seconds it took and what the proxy refused on the way.
    """
    refused: list[str] = []
    local_go = _local_go_version(env)
    candidates = (versions.KUBERNETES, *versions.KUBERNETES_FALLBACKS)
    if first is not None:
        candidates = (first, *(release for release in candidates if release != first))
    for release in candidates:
        main = f"{versions.KUBERNETES_MODULE}@{release.version}"
        (info,) = _go_json(["list", "-m", "-e", "-json", main], env, work)
        if "Error" in info:
            refused.append(f"{main}: {info['Error']['Err']}")
        elif _version_tuple(info.get("GoVersion", "0")) > _version_tuple(local_go):
            refused.append(f"{main}: needs go {info['GoVersion']}, have go {local_go}")
        else:
            staging = sorted(set(_STAGING_REPLACE.findall(Path(info["GoMod"]).read_text())))
            source = _fresh_dir(work / "kubernetes")
            (source / "go.mod").write_text(_kubernetes_go_mod(release, local_go, staging))
            log(
                f"[build] kubernetes {release.version} (staging {release.staging}): building "
                f"{', '.join(commands)} in one go build"
            )
            packages = [f"{versions.KUBERNETES_MODULE}/cmd/{name}" for name in commands]
            job = GoJob(
                "kubernetes",
                [
                    "build",
                    "-mod=mod",
                    "-trimpath",
                    f"-ldflags={_kubernetes_ldflags(release)}",
                    "-o",
                    f"{out}/",
                    *packages,
                ],
                source,
                env,
                log_file,
            )
            try:
                return release, job.wait(), refused
            except ModulesRefused as error:
                refused += [f"{module}: refused by the module proxy" for module in error.refusals]
        log(f"[build] kubernetes {release.version} unavailable: {refused[-1]}")
    raise BuildError(
        "no Kubernetes release could be built from the Go module proxy:\n" + "\n".join(refused)
    )


def _fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _kubernetes_ldflags(release: versions.KubernetesRelease) -> str:
    base = "k8s.io/component-base/version"
    return (
        f"-s -w -X {base}.gitVersion={release.version} -X {base}.gitMajor=1 "
        f"-X {base}.gitMinor={release.minor} -X {base}.gitTreeState=clean"
    )


def go_install_job(
    name: str, package: str, work: Path, out: Path, env: dict[str, str], log_file: Path
) -> GoJob:
    """Start ``go install package@version`` (stripped, trimmed paths) writing into ``out``."""
    return GoJob(
        name,
        ["install", "-trimpath", "-ldflags=-s -w", package],
        work,
        {**env, "GOBIN": str(out)},
        log_file,
    )


def _install(staging_bin: Path, names: Sequence[str]) -> None:
    """Move freshly built binaries into the cache's bin directory."""
    bin_dir().mkdir(parents=True, exist_ok=True)
    for name in names:
        os.replace(staging_bin / name, bin_dir() / name)


def _assemble_stages(env: dict[str, str], work: Path) -> None:
    """Join KWOK's stage definitions from its module into one YAML stream."""
    (info,) = _go_json(
        ["mod", "download", "-json", f"{versions.KWOK_MODULE}@{versions.KWOK}"], env, work
    )
    if "Error" in info:
        raise BuildError(f"cannot download {versions.KWOK_MODULE}@{versions.KWOK}: {info['Error']}")
    stage_root = Path(info["Dir"]) / "kustomize" / "stage"
    documents = []
    for relative in versions.KWOK_STAGES:
        path = stage_root / relative
        if not path.is_file():
            raise BuildError(f"KWOK stage {relative} is missing from {stage_root}")
        documents.append(path.read_text().strip() + "\n")
    stages_path().write_text("---\n".join(documents))


def run_jobs(jobs: Iterable[GoJob], seconds: dict[str, float], log: Log) -> None:
    """Start all jobs, then wait for each; stop the others if one fails."""
    started = list(jobs)
    try:
        for job in started:
            seconds[job.name] = job.wait()
            log(f"[build] {job.name} built in {_format_seconds(seconds[job.name])}")
    finally:
        for job in started:
            job.stop()


@contextlib.contextmanager
def _exclusive(lock_file: Path, log: Log) -> Iterator[float]:
    """Hold an exclusive lock so concurrent builds (e.g. pytest workers) take turns.

    While another build holds it, say so (again every ``WAIT_REPORT_SECONDS``); yield the
    seconds spent waiting. The holder's pid is written into the lock file for that message.
    """
    started = time.monotonic()
    with os.fdopen(os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644), "r+") as handle:
        reports = 0
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waiting = time.monotonic() - started
                if waiting >= reports * WAIT_REPORT_SECONDS:
                    log(_waiting_message(lock_file, handle, waiting if reports else None))
                    reports += 1
                time.sleep(_LOCK_POLL_SECONDS)
        waited = time.monotonic() - started if reports else 0.0
        _write_holder(handle, f"{os.getpid()}\n")
        try:
            yield waited
        finally:
            _write_holder(handle, "")


def _write_holder(handle: IO[str], text: str) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(text)
    handle.flush()


def _waiting_message(lock_file: Path, handle: IO[str], waiting: float | None) -> str:
    """First (``waiting`` None) or later line saying whose build this one waits for."""
    handle.seek(0)
    pid = handle.read().strip()
    holder = f"another build holding {lock_file}" + (f" (pid {pid})" if pid.isdigit() else "")
    if waiting is None:
        return f"[build] waiting for {holder}..."
    return f"[build] still waiting for {holder} ({_format_seconds(waiting)} so far)"


def build(force: bool = False, log: Log = _stderr) -> BuildResult:
    """Build whatever binaries are missing from the cache (all of them with ``force``)."""
    started = time.monotonic()
    env = go_env()
    root = cache_dir()
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / "build.lock", log) as waited:
        return _build_locked(force, env, root, logs, log, started, waited)


def _build_locked(
    force: bool,
    env: dict[str, str],
    root: Path,
    logs: Path,
    log: Log,
    started: float,
    waited: float,
) -> BuildResult:
    work = _fresh_dir(root / "work")
    out = work / "out"
    seconds: dict[str, float] = {}
    manifest = {} if force else read_manifest()
    release = versions.KubernetesRelease(
        manifest.get("kubernetes", versions.KUBERNETES.version),
        manifest.get("staging", versions.KUBERNETES.staging),
    )
    refused: list[str] = manifest.get("refused", [])
    go_version = _local_go_version(env)

    def missing(*names: str) -> bool:
        return force or not all((bin_dir() / name).is_file() for name in names)

    def first_jobs() -> Iterator[GoJob]:
        if missing("etcd"):
            etcd_src = _fresh_dir(work / "etcd")
            (etcd_src / "go.mod").write_text(_etcd_go_mod(go_version))
            log(f"[build] etcd {versions.ETCD}: building")
            yield GoJob(
                "etcd",
                [
                    "build",
                    "-mod=mod",
                    "-trimpath",
                    "-ldflags=-s -w",
                    "-o",
                    str(out / "etcd"),
                    versions.ETCD_MODULE,
                ],
                etcd_src,
                env,
                logs / "etcd.log",
            )
        if missing("kwok"):
            log(f"[build] kwok {versions.KWOK}: building")
            package = f"{versions.KWOK_MODULE}/cmd/kwok@{versions.KWOK}"
            yield go_install_job("kwok", package, work, out, env, logs / "kwok.log")
        if missing("helm") or manifest.get("helm") != versions.HELM:
            log(f"[build] helm {versions.HELM}: building")
            package = f"{versions.HELM_MODULE}/cmd/helm@{versions.HELM}"
            yield go_install_job("helm", package, work, out, env, logs / "helm.log")

    out.mkdir()
    # etcd, kwok and helm are small: build them side by side.
    run_jobs(first_jobs(), seconds, log)
    _install(out, [name for name in ("etcd", "kwok", "helm") if name in seconds])

    commands = [name for name in KUBERNETES_COMMANDS if missing(name)]
    if commands:
        # Commands added to a cache come from the release its other commands came from.
        cached = release if len(commands) < len(KUBERNETES_COMMANDS) else None
        release, seconds["kubernetes"], refused = _build_kubernetes(
            env, work, out, logs / "kubernetes.log", log, commands, cached
        )
        log(f"[build] kubernetes built in {_format_seconds(seconds['kubernetes'])}")
        _install(out, commands)

    if force or not stages_path().is_file():
        _assemble_stages(env, work)
        log(f"[build] kwok stages written to {stages_path()}")
    shutil.rmtree(work, ignore_errors=True)

    previous = manifest.get("build_seconds", {})
    (root / MANIFEST_FILE).write_text(
        json.dumps(
            {
                "kubernetes": release.version,
                "staging": release.staging,
                "etcd": versions.ETCD,
                "kwok": versions.KWOK,
                "helm": versions.HELM,
                "build_seconds": {**previous, **{k: round(v, 1) for k, v in seconds.items()}},
                "refused": refused,
            },
            indent=2,
        )
        + "\n"
    )
    total = _format_seconds(time.monotonic() - started)
    if waited:
        total += f" ({_format_seconds(waited)} waiting for another build)"
    log(f"[build] done in {total}; binaries in {bin_dir()}")
    return BuildResult(bin_dir(), release, seconds, refused)
