"""Apply CustomResourceDefinitions with the Python client and wait until they are served."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

FIELD_MANAGER = "karpenter-conformance"
ESTABLISH_TIMEOUT = 30.0


class CrdError(RuntimeError):
    """A manifest could not be applied or its CRD never became Established."""


def load(files: Sequence[Path]) -> list[dict[str, Any]]:
    """CRD documents of the given YAML files (any other kind is an error)."""
    documents = []
    for path in files:
        for document in yaml.safe_load_all(path.read_text()):
            if not document:
                continue
            if document.get("kind") != "CustomResourceDefinition":
                raise CrdError(
                    f"{path}: expected CustomResourceDefinition, got {document.get('kind')}"
                )
            documents.append(document)
    return documents


def _established(api: client.ApiextensionsV1Api, name: str) -> bool:
    status = api.read_custom_resource_definition_status(name).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def apply(kubeconfig: Path, files: Sequence[Path], timeout: float = ESTABLISH_TIMEOUT) -> list[str]:
    """Server-side apply every CRD in ``files``; return their names once Established."""
    documents = load(files)
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
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            pending = [name for name in pending if not _established(api, name)]
            if pending and time.monotonic() > deadline:
                raise CrdError(f"CRDs not Established after {timeout:.0f}s: {', '.join(pending)}")
            if pending:
                time.sleep(0.1)
    return names
