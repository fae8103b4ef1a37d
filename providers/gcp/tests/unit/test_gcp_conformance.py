"""The conformance suite's contract level for the GCP provider, against the profile's fake GCE
server (GCP skips no check); the profile's throttling for the fault soak, and the node images it
publishes for the version of a Kubernetes API beside it."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from karpenter_conformance.suite.runner import run
from karpenter_core.cloudprovider.registry import discover
from karpenter_gcp.conformance import PROJECT, REGION, GCPProfile

# the suite runs its own pytest session in this process, with a fake GCE server
pytestmark = pytest.mark.slow

SKIPS: set[str] = set()
"""The contract checks GCP may skip; the list must not grow."""


def test_gcp_passes_the_contract_level_against_the_fake_gce_server() -> None:
    report = run(discover().provider("gcp"))
    failed = [f"{r.name}: {r.message}" for r in report.results if r.outcome == "failed"]
    assert not failed, "\n".join(failed)
    assert report.ok
    skipped = {r.name for r in report.results if r.outcome == "skipped"}
    assert skipped <= SKIPS, f"GCP's skip list grew: {sorted(skipped - SKIPS)}"


def test_the_profile_throttles_chosen_calls_until_the_faults_are_cleared() -> None:
    profile = GCPProfile()
    profile.start()
    try:
        instances = profile.clients().instances
        zone = f"{REGION}-a"
        profile.cloud_errors(["instances.insert/list"])
        with pytest.raises(exceptions.TooManyRequests):
            list(instances.list(project=PROJECT, zone=zone, retry=None))
        profile.clear_faults()
        assert list(instances.list(project=PROJECT, zone=zone)) == []
        with pytest.raises(ValueError, match="unknown Compute call 'ec2:CreateFleet'"):
            profile.cloud_errors(["ec2:CreateFleet"])
    finally:
        profile.stop()


def test_node_images_of_the_clusters_version_are_published() -> None:
    profile = GCPProfile()
    profile.start()
    try:
        profile._server.publish_node_images("v1.36.3")
        profile._version = "v1.36.3"
        images = [i["sourceImage"] for i in profile.node_class()["status"]["images"]]
    finally:
        profile.stop()
    assert images and all("gke-1363-" in image for image in images)
