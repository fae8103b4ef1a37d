"""The GCENodeClass model: the CRD tables' objects (the integration tier also sends them to an
apiserver), the image family it implies, the boot disk, the drift hash and the generated CRD."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from karpenter_core.sdk.crds import crd_file, crd_path
from karpenter_gcp.nodeclass import NODE_CLASS, GCENodeClass, GCENodeClassSpec, nodeclass_hash
from providers.gcp.tests.integration.test_gcp_crds import BAD, GOOD, model_error


@pytest.mark.parametrize("spec", GOOD.values(), ids=GOOD.keys())
def test_the_model_accepts(spec: dict[str, Any]) -> None:
    assert model_error(spec) is None


@pytest.mark.parametrize(("spec", "message"), BAD.values(), ids=BAD.keys())
def test_the_model_refuses_naming_the_field(spec: dict[str, Any], message: str) -> None:
    error = model_error(spec)
    assert error is not None
    assert "spec" in error.splitlines()[1]


def test_the_model_says_what_the_crd_says() -> None:
    for name in (
        "a channel beside COS latest",
        "a reserved metadata key",
        "a small disk",
        "two boot disks",
        "a local SSD boot disk",
        "a local SSD of another size",
    ):
        spec, message = BAD[name]
        assert message in (model_error(spec) or ""), name


def spec(**fields: Any) -> GCENodeClassSpec:
    return GCENodeClass.from_manifest({"metadata": {"name": "n"}, "spec": fields}).spec


@pytest.mark.parametrize(
    ("fields", "family"),
    [
        ({"imageSelectorTerms": [{"alias": "Ubuntu@latest"}]}, "Ubuntu"),
        (
            {
                "imageSelectorTerms": [{"alias": "Ubuntu@latest"}],
                "imageFamily": "ContainerOptimizedOS",
            },
            "ContainerOptimizedOS",
        ),
        ({"imageSelectorTerms": [{"family": "Ubuntu2204", "version": "latest"}]}, "Ubuntu"),
        (
            {"imageSelectorTerms": [{"family": "ContainerOptimizedOS", "channel": "stable"}]},
            "ContainerOptimizedOS",
        ),
        ({"imageSelectorTerms": [{"id": "projects/p/global/images/i"}]}, "Custom"),
    ],
)
def test_the_image_family(fields: dict[str, Any], family: str) -> None:
    assert spec(**fields).family() == family


def test_the_boot_disk_size() -> None:
    terms = [{"alias": "Ubuntu@latest"}]
    assert spec(imageSelectorTerms=terms).boot_disk_gib() == 100
    disks = [{"sizeGiB": 375, "category": "local-ssd"}, {"sizeGiB": 60, "boot": True}]
    assert spec(imageSelectorTerms=terms, disks=disks).boot_disk_gib() == 60


def test_the_hash_leaves_out_the_image_terms_but_not_the_family_they_imply() -> None:
    base = nodeclass_hash(spec(imageSelectorTerms=[{"alias": "Ubuntu@latest"}]))

    assert nodeclass_hash(spec(imageSelectorTerms=[{"alias": "Ubuntu@v20260101"}])) == base
    assert (
        nodeclass_hash(spec(imageSelectorTerms=[{"alias": "Ubuntu@latest"}], imageFamily="Ubuntu"))
        == base
    )
    cos = spec(imageSelectorTerms=[{"alias": "ContainerOptimizedOS@latest"}])
    assert nodeclass_hash(cos) != base
    labelled = spec(imageSelectorTerms=[{"alias": "Ubuntu@latest"}], labels={"team": "a"})
    assert nodeclass_hash(labelled) != base


def test_the_shipped_crd_is_generated_from_the_model() -> None:
    shipped = crd_path(NODE_CLASS).read_text()
    assert shipped == crd_file("gcp", NODE_CLASS)
    crd = yaml.safe_load(shipped)
    assert crd["spec"]["names"]["shortNames"] == ["gcenc", "gcencs"]
    assert crd["spec"]["versions"][0]["name"] == "v1alpha1"


def test_the_cluster_role_covers_the_kind_its_status_and_finalizers() -> None:
    role = yaml.safe_load(
        (crd_path(NODE_CLASS).parent.parent / "rbac" / "clusterrole.yaml").read_text()
    )
    granted = {
        (resource, verb)
        for rule in role["rules"]
        if rule["apiGroups"] == [NODE_CLASS.group]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    plural = NODE_CLASS.plural
    assert {(plural, "list"), (plural, "watch"), (plural, "patch")} <= granted
    assert {(f"{plural}/status", "patch"), (f"{plural}/finalizers", "patch")} <= granted
