"""AWS provider settings (flags and environment), the boto3 clients built from them, and how the
CLI reports a bad setting: one line naming the flag, no traceback."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from karpenter_aws.clients import SERVICES, AWSClients
from karpenter_aws.moto_account import AWSEnv
from karpenter_aws.pricing import pricing_api_region
from karpenter_aws.settings import OPTIONS, AWSSettings, SettingsError
from karpenter_core.cli.main import cli
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.operator.settings import Settings
from karpenter_core.sdk.record import option_flag

KARPENTER = Path(sys.executable).with_name("karpenter")
AWS_CONFIG_ENV = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
)
"""Environment variables through which the SDK would pick a region, profile or endpoint."""


@pytest.fixture
def no_sdk_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK with no region, profile or endpoint from the environment or config files."""
    for name in AWS_CONFIG_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# Settings


def test_defaults() -> None:
    settings = AWSSettings.from_mapping({})

    assert settings == AWSSettings()
    assert settings.cluster_name == ""
    assert settings.region == ""
    assert settings.endpoint_url == ""
    assert settings.vm_memory_overhead_percent == 0.075
    assert settings.reserved_enis == 0
    assert settings.isolated_vpc is False
    assert settings.nodeclass_resync == timedelta(minutes=1)
    assert settings.batch_idle == timedelta(milliseconds=35)
    assert settings.batch_max == timedelta(seconds=1)


def test_option_defaults_and_none_parse_to_the_dataclass_defaults() -> None:
    given_defaults = {option.name: option.default for option in OPTIONS}
    all_none = {option.name: None for option in OPTIONS}

    assert AWSSettings.from_mapping(given_defaults) == AWSSettings()
    assert AWSSettings.from_mapping(all_none) == AWSSettings()


def test_every_value_parsed() -> None:
    settings = AWSSettings.from_mapping(
        {
            "cluster-name": " test-cluster ",
            "region": "eu-west-1",
            "cluster-endpoint": "https://ABC.gr7.eu-west-1.eks.amazonaws.com",
            "cluster-ca-bundle": "LS0tLS1CRUdJTg==",
            "service-cidr": "10.100.0.0/16",
            "interruption-queue": "karpenter-interruptions",
            "aws-endpoint-url": "http://127.0.0.1:5000",
            "vm-memory-overhead-percent": "0.1",
            "reserved-enis": "2",
            "isolated-vpc": "true",
            "nodeclass-resync-period": "5m",
            "fleet-batch-idle-duration": "10ms",
            "fleet-batch-max-duration": "2s",
        }
    )

    assert settings == AWSSettings(
        cluster_name="test-cluster",
        region="eu-west-1",
        cluster_endpoint="https://ABC.gr7.eu-west-1.eks.amazonaws.com",
        cluster_ca_bundle="LS0tLS1CRUdJTg==",
        service_cidr="10.100.0.0/16",
        interruption_queue="karpenter-interruptions",
        endpoint_url="http://127.0.0.1:5000",
        vm_memory_overhead_percent=0.1,
        reserved_enis=2,
        isolated_vpc=True,
        nodeclass_resync=timedelta(minutes=5),
        batch_idle=timedelta(milliseconds=10),
        batch_max=timedelta(seconds=2),
    )


def test_non_string_values_are_read_as_text() -> None:
    settings = AWSSettings.from_mapping(
        {"reserved-enis": 3, "isolated-vpc": True, "vm-memory-overhead-percent": 0}
    )

    assert (settings.reserved_enis, settings.isolated_vpc) == (3, True)
    assert settings.vm_memory_overhead_percent == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        (" true ", True),
        ("false", False),
        ("False", False),
        ("0", False),
        ("no", False),
        ("", False),
    ],
)
def test_isolated_vpc_booleans(text: str, expected: bool) -> None:
    assert AWSSettings.from_mapping({"isolated-vpc": text}).isolated_vpc is expected


@pytest.mark.parametrize(
    "region", ["us-east-1", "us-gov-west-1", "cn-north-1", "ap-southeast-5", " eu-west-1 "]
)
def test_region_names(region: str) -> None:
    assert AWSSettings.from_mapping({"region": region}).region == region.strip()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5000",
        "https://ec2.us-east-1.amazonaws.com",
        "http://localhost",
        "http://[::1]:5000/",
    ],
)
def test_endpoint_urls(url: str) -> None:
    assert AWSSettings.from_mapping({"aws-endpoint-url": url}).endpoint_url == url


BAD_VALUES = [
    ("vm-memory-overhead-percent", "2", "'2' is not a fraction between 0 and 1"),
    ("vm-memory-overhead-percent", "1", "'1' is not a fraction between 0 and 1"),
    ("vm-memory-overhead-percent", "-0.1", "'-0.1' is not a fraction between 0 and 1"),
    ("vm-memory-overhead-percent", "7.5%", "'7.5%' is not a fraction between 0 and 1"),
    ("vm-memory-overhead-percent", "nan", "'nan' is not a fraction between 0 and 1"),
    ("vm-memory-overhead-percent", "abc", "'abc' is not a fraction between 0 and 1"),
    ("reserved-enis", "-1", "-1 is negative"),
    ("reserved-enis", "1.5", "'1.5' is not a whole number"),
    ("reserved-enis", "two", "'two' is not a whole number"),
    ("isolated-vpc", "maybe", "'maybe' is not a boolean (true or false)"),
    ("nodeclass-resync-period", "soon", "not a duration"),
    ("nodeclass-resync-period", "-1m", "negative"),
    ("fleet-batch-idle-duration", "35", "not a duration"),
    ("fleet-batch-max-duration", "1 second", "not a duration"),
    ("region", "us east 1", "'us east 1' is not an AWS region name (e.g. us-east-1)"),
    ("region", "us-east-1-", "is not an AWS region name"),
    ("region", "US-EAST-1", "is not an AWS region name"),
    ("aws-endpoint-url", "localhost:5000", "'localhost:5000' is not an http(s) URL"),
    ("aws-endpoint-url", "notaurl", "is not an http(s) URL"),
    ("aws-endpoint-url", "ftp://example.com", "is not an http(s) URL"),
    ("aws-endpoint-url", "http://[::1", "is not an http(s) URL"),
    ("aws-endpoint-url", "http://localhost:99999", "is not an http(s) URL"),
    ("aws-endpoint-url", "http://:5000", "is not an http(s) URL"),
]


@pytest.mark.parametrize(("flag", "value", "message"), BAD_VALUES)
def test_bad_value_names_the_flag(flag: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        AWSSettings.from_mapping({flag: value})

    text = str(raised.value)
    assert text.startswith(f"{option_flag('aws', flag)}: "), text
    assert message in text
    assert "\n" not in text


def test_settings_error_is_a_cloud_provider_error() -> None:
    # the controller command turns CloudProviderError from the factory into a one-line error
    assert issubclass(SettingsError, CloudProviderError)


def test_options_are_unique_and_documented() -> None:
    names = [option.name for option in OPTIONS]
    envs = [option.env for option in OPTIONS]

    assert len(set(names)) == len(names)
    assert None not in envs and len(set(envs)) == len(envs)
    assert all(option.help and not option.help.endswith(".") for option in OPTIONS)


def test_options_shared_with_the_core_mean_the_same() -> None:
    core = {name.replace("_", "-"): env for name, env, _ in Settings.options()}
    core_envs = set(core.values())

    shared = {option.name: option.env for option in OPTIONS if option.name in core}
    assert shared == {"cluster-name": "CLUSTER_NAME"}
    assert all(shared[name] == core[name] for name in shared)
    assert {option.env for option in OPTIONS if option.name not in core} & core_envs == set()


def test_every_option_sets_a_field() -> None:
    changed = {
        "cluster-name": "c",
        "region": "eu-west-1",
        "cluster-endpoint": "https://e",
        "cluster-ca-bundle": "b",
        "service-cidr": "10.0.0.0/16",
        "interruption-queue": "q",
        "aws-endpoint-url": "http://h",
        "vm-memory-overhead-percent": "0.5",
        "reserved-enis": "1",
        "isolated-vpc": "true",
        "nodeclass-resync-period": "2m",
        "fleet-batch-idle-duration": "1ms",
        "fleet-batch-max-duration": "3s",
    }
    assert set(changed) == {option.name for option in OPTIONS}
    defaults = AWSSettings()

    for name, value in changed.items():
        settings = AWSSettings.from_mapping({name: value})
        assert settings != defaults, f"--{name} sets no field"


# Clients


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("us-east-1", "us-east-1"),
        ("us-west-2", "us-east-1"),
        ("ca-central-1", "us-east-1"),
        ("sa-east-1", "us-east-1"),
        ("us-gov-west-1", "us-east-1"),
        ("eu-west-1", "eu-central-1"),
        ("eu-central-2", "eu-central-1"),
        ("me-south-1", "us-east-1"),
        ("af-south-1", "us-east-1"),
        ("il-central-1", "us-east-1"),
        ("ap-northeast-1", "ap-south-1"),
        ("ap-south-1", "ap-south-1"),
        ("cn-north-1", "cn-northwest-1"),
    ],
)
def test_pricing_uses_the_nearest_price_list_endpoint(region: str, expected: str) -> None:
    assert pricing_api_region(region) == expected


def test_given_clients_are_used_as_they_are(no_sdk_config: None) -> None:
    given = {name: object() for name in SERVICES}
    clients = AWSClients(AWSSettings(), given)

    # no region anywhere: nothing is built, so nothing needs one
    assert clients.ec2 is given["ec2"]
    assert clients.ssm is given["ssm"]
    assert clients.sqs is given["sqs"]
    assert clients.iam is given["iam"]
    assert clients.eks is given["eks"]
    assert clients.pricing is given["pricing"]


def test_unknown_client_names_are_refused() -> None:
    with pytest.raises(SettingsError) as raised:
        AWSClients(AWSSettings(region="us-east-1"), {"ec2": object(), "s3": object()})

    assert "unknown AWS clients ['s3']" in str(raised.value)
    assert "known: ec2, ssm, sqs, iam, eks, pricing" in str(raised.value)


def test_no_region_is_a_clear_error(no_sdk_config: None) -> None:
    clients = AWSClients(AWSSettings(), {"eks": object()})

    assert clients.region == ""
    with pytest.raises(SettingsError, match="no AWS region: set --region or AWS_REGION"):
        _ = clients.ec2
    assert clients.eks is not None  # a given client still serves


def test_region_from_the_sdk_when_unset(
    no_sdk_config: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # the SDK's variable; the CLI
    # reads AWS_REGION into --region itself

    assert AWSClients(AWSSettings()).region == "eu-west-1"
    assert AWSClients(AWSSettings(region="us-west-2")).region == "us-west-2"
    assert AWSClients(AWSSettings()).ec2.meta.region_name == "eu-west-1"


def test_built_clients_use_the_region_and_pricing_its_endpoint(no_sdk_config: None) -> None:
    clients = AWSClients(AWSSettings(region="ap-northeast-1"))

    assert clients.ec2.meta.region_name == "ap-northeast-1"
    assert clients.ec2.meta.endpoint_url == "https://ec2.ap-northeast-1.amazonaws.com"
    assert clients.pricing.meta.region_name == "ap-south-1"
    assert clients.pricing.meta.endpoint_url == "https://api.pricing.ap-south-1.amazonaws.com"


def test_endpoint_override_applies_to_every_built_client(no_sdk_config: None) -> None:
    endpoint = "http://127.0.0.1:5000"
    clients = AWSClients(AWSSettings(region="us-west-2", endpoint_url=endpoint))

    for service in SERVICES:
        client = getattr(clients, service)
        assert client.meta.endpoint_url == endpoint, service
        assert client.meta.service_model.service_name == service
    assert clients.pricing.meta.region_name == "us-east-1"


def test_clients_are_built_once(no_sdk_config: None) -> None:
    clients = AWSClients(AWSSettings(region="us-east-1"))

    assert clients.ec2 is clients.ec2
    assert clients.sqs is not clients.ec2


def test_a_missing_profile_is_a_clear_error(
    no_sdk_config: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "nope")

    with pytest.raises(SettingsError, match=r"cannot read the AWS configuration: .*\(nope\)"):
        _ = AWSClients(AWSSettings()).region
    with pytest.raises(SettingsError, match=r"cannot build the AWS ec2 client: .*\(nope\)"):
        _ = AWSClients(AWSSettings(region="us-east-1")).ec2


def test_a_bad_region_from_the_sdk_is_a_clear_error(
    no_sdk_config: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us east 1")

    with pytest.raises(SettingsError, match=r"cannot build the AWS ec2 client: .*'us east 1'"):
        _ = AWSClients(AWSSettings()).ec2


def test_built_clients_reach_the_endpoint(aws: AWSEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # only the setting points boto3 at moto
    settings = AWSSettings.from_mapping(
        {"region": aws.region, "aws-endpoint-url": aws.endpoint_url}
    )
    clients = AWSClients(settings)

    subnets = clients.ec2.describe_subnets()["Subnets"]
    assert {subnet["SubnetId"] for subnet in subnets} >= set(aws.subnet_list)
    assert clients.sqs.get_queue_url(QueueName=aws.queue_name)["QueueUrl"]


# The command line


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig naming an apiserver nothing listens on (loading it needs no connection)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    return path


def cli_error(args: list[str], env: dict[str, str | None]) -> str:
    """The one-line error the CLI prints for ``args`` (it must exit 1 without a traceback)."""
    result = CliRunner().invoke(cli, args, env=env)

    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0].removeprefix("Error: ")


@pytest.mark.parametrize(("flag", "value", "message"), BAD_VALUES)
def test_controller_reports_a_bad_flag_in_one_line(
    kubeconfig: Path, no_sdk_config: None, flag: str, value: str, message: str
) -> None:
    given = option_flag("aws", flag)
    args = ["controller", "--provider", "aws", "--aws-region", "us-east-1", given, value]
    if flag == "region":
        args = args[:3] + args[5:]

    error = cli_error(args, {"KUBECONFIG": str(kubeconfig)})

    assert error.startswith(f"{given}: ")
    assert message in error


def test_controller_reports_a_bad_unprefixed_flag_by_the_options_flag(
    kubeconfig: Path, no_sdk_config: None
) -> None:
    args = ["controller", "--provider", "aws", "--region", "us-east-1", "--reserved-enis", "-1"]

    error = cli_error(args, {"KUBECONFIG": str(kubeconfig)})

    assert error == "--aws-reserved-enis: -1 is negative"


def test_controller_reports_a_bad_environment_variable_by_its_flag(
    kubeconfig: Path, no_sdk_config: None
) -> None:
    env = {"KUBECONFIG": str(kubeconfig), "VM_MEMORY_OVERHEAD_PERCENT": "7.5"}

    error = cli_error(["controller", "--provider", "aws", "--region", "us-east-1"], env)

    assert error == (
        "--aws-vm-memory-overhead-percent: '7.5' is not a fraction between 0 and 1 (e.g. 0.075)"
    )


def test_controller_without_a_region(kubeconfig: Path, no_sdk_config: None) -> None:
    error = cli_error(["controller", "--provider", "aws"], {"KUBECONFIG": str(kubeconfig)})

    assert error.startswith("no AWS region: set --region or AWS_REGION")


def test_controller_with_a_missing_profile(kubeconfig: Path, no_sdk_config: None) -> None:
    env = {"KUBECONFIG": str(kubeconfig), "AWS_PROFILE": "nope"}

    error = cli_error(["controller", "--provider", "aws", "--region", "us-east-1"], env)

    assert error.startswith("cannot build the AWS ec2 client:")
    assert "(nope)" in error


def test_controller_without_a_kubeconfig(tmp_path: Path, no_sdk_config: None) -> None:
    missing = tmp_path / "missing"
    env: dict[str, str | None] = {"KUBECONFIG": None, "HOME": str(tmp_path)}

    error = cli_error(["controller", "--provider", "aws", "--kubeconfig", str(missing)], env)

    assert error.startswith(f"cannot load the Kubernetes configuration from {missing}:")


@pytest.mark.slow
def test_simulate_reports_a_bad_flag_in_one_line(no_sdk_config: None) -> None:
    error = cli_error(["simulate", "--provider", "aws", "--reserved-enis", "-2"], {})

    assert error == "--aws-reserved-enis: -2 is negative"


def run_karpenter(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KARPENTER), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "AWS_CONFIG_FILE": "/dev/null", **env},
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_installed_command_prints_one_line(kubeconfig: Path, tmp_path: Path) -> None:
    """The real process: no traceback and no warnings (e.g. about flags declared twice)."""
    result = run_karpenter(
        "controller",
        "--provider",
        "aws",
        "--aws-region",
        "us-east-1",
        "--aws-vm-memory-overhead-percent",
        "2",
        env={"KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)},
    )

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "Error: --aws-vm-memory-overhead-percent: '2' is not a fraction between 0 and 1 "
        "(e.g. 0.075)\n"
    )


@pytest.mark.slow
def test_controller_help_declares_each_flag_once(tmp_path: Path) -> None:
    result = run_karpenter("controller", "--help", env={"HOME": str(tmp_path)})

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    for option in OPTIONS:
        assert result.stdout.count(f"{option_flag('aws', option.name)} ") == 1, option.name
    assert result.stdout.count("--cluster-name ") == 1  # the core's, which AWS reads too
    assert "--region " not in result.stdout  # today's unprefixed flags are hidden aliases


@pytest.mark.slow
def test_without_a_configured_region_the_nodes_metadata_service_gives_it(
    no_sdk_config: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Metadata(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            self._answer(b"token")

        def do_GET(self) -> None:
            zone = self.path == "/latest/meta-data/placement/availability-zone/"
            self._answer(b"eu-west-3b" if zone else b"", 200 if zone else 404)

        def _answer(self, body: bytes, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
        monkeypatch.setenv(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{server.server_port}/"
        )
        clients = AWSClients(AWSSettings())
        assert clients.region == "eu-west-3"
        assert clients.ec2.meta.region_name == "eu-west-3"
    finally:
        server.shutdown()
