"""``karpenter convert``: manifests of older Karpenter APIs to v1 NodePools and NodeClasses."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from dataclasses import replace
from typing import Any

import click
import yaml
from pydantic import BaseModel, ValidationError

from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cli.provider_log import WarningCollector, collecting_logger
from karpenter_core.cloudprovider.plugin import ProviderContext, ProviderRecord
from karpenter_core.cloudprovider.registry import discover
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.convert import (
    Conversion,
    Converted,
    Finding,
    NodeClassConverter,
    convert_objects,
    describe,
    input_field,
    needs_conversion,
    unsatisfiable,
)
from karpenter_core.manifests import Document, ManifestError, load_documents
from karpenter_core.manifests.errors import one_line
from karpenter_core.manifests.validation import from_validation_error

__all__ = ["convert", "converted_documents", "converters"]


def converters() -> list[NodeClassConverter]:
    """The NodeClass converters of the installed providers."""
    return [record.convert() for record in discover().records.values() if record.convert]


def _owner(obj: Mapping[str, Any]) -> tuple[ProviderRecord, type[BaseModel]] | None:
    """The provider whose NodeClass kind ``obj`` is (or a NodePool's nodeClassRef names)."""
    if obj.get("kind") == "NodePool":
        ref: Any = obj
        for key in ("spec", "template", "spec", "nodeClassRef"):
            ref = ref.get(key) if isinstance(ref, Mapping) else None
        if not isinstance(ref, Mapping):  # validating the output reports it
            return None
        group, kind = ref.get("group"), ref.get("kind")
    else:
        group, kind = str(obj.get("apiVersion") or "").rpartition("/")[0], obj.get("kind")
    for record in discover().records.values():
        for info in record.node_classes:
            if (info.group, info.kind) == (group, kind):
                return record, info.model
    return None


def _check_output(result: Conversion, region: str | None) -> None:
    """Each output object must validate here; each NodePool must have an instance type in its
    provider's offline catalog. Findings are added to ``result``."""
    node_classes: dict[str, dict[tuple[str, str], Any]] = {}
    pools: list[tuple[Converted, NodePool, ProviderRecord]] = []
    for converted in result.objects:
        owner = _owner(converted.obj)
        is_nodepool = converted.obj.get("kind") == "NodePool"
        if owner is None and not is_nodepool:
            continue
        model: type[BaseModel] = NodePool if is_nodepool or owner is None else owner[1]
        try:
            decoded = model.model_validate(converted.obj)
        except ValidationError as err:
            problem = from_validation_error(err)
            if converted.placeholder:  # not in the input: the finding names the output object
                about, where = _about(converted), problem.field
                written = f", written for {converted.source},"
            else:
                about, where = converted.source, input_field(converted.source, problem.field)
                written = ""
            result.findings.append(
                Finding(
                    about,
                    where,
                    f"the output {converted.obj.get('kind')}{written} does not validate: "
                    f"{problem.message}",
                )
            )
            continue
        if owner is None:
            continue
        record = owner[0]
        if isinstance(decoded, NodePool):
            pools.append((converted, decoded, record))
        else:
            key = (str(converted.obj["kind"]), str(converted.obj["metadata"]["name"]))
            node_classes.setdefault(record.name, {})[key] = decoded
    clouds: dict[str, Any] = {}
    for converted, nodepool, record in pools:
        if record.name not in clouds:
            clouds[record.name] = _offline(
                record, region, node_classes.get(record.name, {}), result
            )
        cloud = clouds[record.name]
        if cloud is None:
            continue
        where = f"the {record.name} catalog ({region})" if region else f"the {record.name} catalog"
        try:
            instance_types = cloud.get_instance_types(nodepool)
        except CloudProviderError as err:
            result.findings.append(
                Finding(converted.source, "", f"catalog not checked: {err}", "note")
            )
            continue
        finding = unsatisfiable(converted.obj, converted.source, instance_types, where)
        if finding is not None:
            result.findings.append(
                replace(finding, field=input_field(finding.object, finding.field))
            )


def _offline(
    record: ProviderRecord,
    region: str | None,
    given: Mapping[tuple[str, str], Any],
    result: Conversion,
) -> Any:
    """The provider built offline (its packaged catalog), or None with a note saying why."""
    handler = WarningCollector()
    logger = collecting_logger(f"karpenter.convert.{record.name}", handler)
    try:
        cloud = record.factory(
            ProviderContext(
                settings=record.settings({"region": region}),
                logger=logger,
                node_classes=lambda kind, name: given.get((kind, name)),
            )
        )
    except CloudProviderError as err:
        result.findings.append(
            Finding(f"provider {record.name}", "", f"catalog not checked: {err}", "note")
        )
        return None
    for message in handler.messages:
        result.findings.append(Finding(f"provider {record.name}", "", message, "note"))
    return cloud


def _about(converted: Converted) -> str:
    """The object findings about ``converted`` name: its input object, or for a placeholder
    (which is in no input) itself."""
    return describe(converted.obj) if converted.placeholder else converted.source


def _render_yaml(result: Conversion) -> str:
    by_source: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_source.setdefault(finding.object, []).append(finding)
    parts = []
    for converted in result.objects:
        about = _about(converted)
        comments = [f"# {one_line(comment)}" for comment in converted.comments]
        # a placeholder's comments come first: they say whom it was written for
        lines = comments if converted.placeholder else [f"# from {one_line(converted.source)}"]
        for finding in by_source.get(about, ()):
            lines.append("# " + one_line(finding.line().replace(f"{about}: ", "", 1)))
        if not converted.placeholder:
            lines.extend(comments)
        body = yaml.safe_dump(converted.obj, sort_keys=False, default_flow_style=False)
        parts.append("---\n" + "\n".join(lines) + "\n" + body)
    return "".join(parts)


def _lines(findings: Sequence[Finding], severity: str, unless: Set[str] = frozenset()) -> list[str]:
    """The findings of ``severity`` as lines, once each, but those about objects in ``unless``."""
    return list(
        dict.fromkeys(
            one_line(f.line())
            for f in findings
            if f.severity == severity and f.object not in unless
        )
    )


@click.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    metavar="FILE",
    help="Manifests to convert ('-' for stdin, a directory for its YAML files); repeatable.",
)
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
)
@click.option(
    "--region",
    default=None,
    help="Region whose offline catalog the NodePools' requirements are checked against "
    "(default: the provider's).",
)
def convert(files: tuple[str, ...], output: str, region: str | None) -> None:
    """Convert v1alpha5 Provisioners, v1beta1 NodePools, the providers' older NodeClasses
    (AWSNodeTemplate, v1beta1 EC2NodeClass) and upstream v1.x objects to v1 NodePools and
    NodeClasses for kubectl apply.

    Each decision that is not one-to-one is a comment in the output; what the manifests get
    wrong is a warning on stderr, one line each, naming the object and field.
    """
    try:
        documents = load_documents(files)
    except ManifestError as err:
        raise click.ClickException(str(err)) from None
    result = convert_objects([doc.obj for doc in documents], converters())
    if not result.objects:
        raise click.ClickException(
            "no Karpenter objects to convert in the input (Provisioner, NodePool or a "
            "provider's NodeClass)"
        )
    _check_output(result, region)
    if output == "json":
        items = [converted.obj for converted in result.objects]
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2))
        for line in _lines(result.findings, "note"):
            click.echo(line, err=True)
    else:
        click.echo(_render_yaml(result), nl=False)
        written = {_about(converted) for converted in result.objects}
        for line in _lines(result.findings, "note", unless=written):
            click.echo(line, err=True)
    for line in _lines(result.findings, "warning"):
        click.echo(line, err=True)


def converted_documents(
    documents: Sequence[Document],
) -> tuple[list[Document], list[str], list[str]]:
    """For ``simulate``: the documents with those of older Karpenter APIs converted to v1 (each
    converted object keeps its document's place in error messages), a note per converted
    object, and the conversion's warnings. Documents are returned as they are when none is
    of an older API."""
    available = converters()
    if not any(needs_conversion(doc.obj, available) for doc in documents):
        return list(documents), [], []
    result = convert_objects([doc.obj for doc in documents], available, simulation=True)
    origin = {describe(doc.obj): doc for doc in documents}
    converted = [documents[position] for position in result.others]
    notes = []
    for item in result.objects:
        doc = origin[item.source]
        converted.append(Document(doc.source, doc.index, item.obj, doc.item))
        if item.placeholder:
            notes.append(
                f"{item.obj['kind']} {item.obj['metadata']['name']} ({item.obj['apiVersion']}) "
                f"added for {item.source}, which names no NodeClass, with placeholders, as "
                "karpenter convert writes it"
            )
        elif (doc.obj.get("apiVersion"), doc.kind) != (item.obj["apiVersion"], item.obj["kind"]):
            notes.append(
                f"{item.source} ({doc.obj.get('apiVersion')}) read as {item.obj['kind']} "
                f"{item.obj['metadata']['name']} ({item.obj['apiVersion']}), as karpenter "
                "convert writes it"
            )
    return converted, notes, _lines(result.findings, "warning")
