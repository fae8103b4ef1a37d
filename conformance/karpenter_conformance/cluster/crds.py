"""Apply CustomResourceDefinitions with the Python client and wait until they are served."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from karpenter_conformance.waiting import wait_until

FIELD_MANAGER = "karpenter-conformance"
ESTABLISH_TIMEOUT = 30.0


class CrdError(RuntimeError):
    """A manifest could not be applied or its CRD never became Established."""


def load(files: Sequence[Path]) -> list[dict[str, Any]]:
    """CRD documents of the given YAML files (anything else is an error)."""
    documents = []
    for path in files:
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except OSError as error:
            raise CrdError(f"{path}: cannot read: {error.strerror}") from None
        except yaml.YAMLError as error:
            raise CrdError(f"{path}: not valid YAML: {_yaml_problem(error)}") from None
        for document in loaded:
            if not document:
                continue
            kind = document.get("kind") if isinstance(document, dict) else None
            if kind != "CustomResourceDefinition":
                got = kind if isinstance(document, dict) else f"a YAML {type(document).__name__}"
                raise CrdError(f"{path}: expected CustomResourceDefinition, got {got}")
            metadata = document.get("metadata")
            if not isinstance(metadata, dict) or not metadata.get("name"):
                raise CrdError(f"{path}: a CustomResourceDefinition has no metadata.name")
            documents.append(document)
    return documents


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    return f"{problem} at line {mark.line + 1} column {mark.column + 1}" if mark else problem


def _established(api: client.ApiextensionsV1Api, name: str) -> bool:
    status = api.read_custom_resource_definition_status(name).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def apply(kubeconfig: Path, files: Sequence[Path], timeout: float = ESTABLISH_TIMEOUT) -> list[str]:
    """Server-side apply every CRD in ``files``; return their names once Established."""
    return apply_documents(kubeconfig, load(files), timeout)


def apply_documents(
    kubeconfig: Path, documents: Sequence[dict[str, Any]], timeout: float = ESTABLISH_TIMEOUT
) -> list[str]:
    """Server-side apply CRD ``documents`` (from ``load``); return their names once Established."""
    if not documents:
        return []
    with config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        api = client.ApiextensionsV1Api(api_client)
        names = []
        for document in documents:
            name = document["metadata"]["name"]
            try:
                api.patch_custom_resource_definition(
                    name,
                    document,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type="application/apply-patch+yaml",
                )
            except client.ApiException as error:
                raise CrdError(
                    f"applying CRD {name} failed: {error.status} {error.body}"
                ) from error
            names.append(name)
        pending = list(names)

        def all_established() -> bool:
            pending[:] = [name for name in pending if not _established(api, name)]
            return not pending

        try:
            wait_until(all_established, "CRDs to be Established", timeout, interval=0.1)
        except TimeoutError:
            raise CrdError(
                f"CRDs not Established after {timeout:.0f}s: {', '.join(pending)}"
            ) from None
    return names
