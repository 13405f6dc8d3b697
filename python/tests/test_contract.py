"""The client's types against the schema, and the installed wheel itself."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import sysconfig
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import agentvfs
from agentvfs import types as t
from agentvfs.types import json_key

# Each dataclass and the schema object it mirrors: (command, $defs name or None for `data`).
MODELS: dict[type, tuple[str, str | None]] = {
    t.Target: ("vault create", None),
    t.VaultListEntry: ("vault list", "VaultListEntry"),
    t.VaultInfo: ("vault info", None),
    t.ForkInfo: ("vault info", "ForkInfo"),
    t.Origin: ("vault info", "Origin"),
    t.Quota: ("vault info", "Quota"),
    t.ForkOutput: ("vault fork", None),
    t.DeleteReport: ("vault delete", None),
    t.CheckpointInfo: ("checkpoint save", None),
    t.NodeInfo: ("stat", None),
    t.DeviceNumber: ("stat", "DeviceNumber"),
    t.WriteOutput: ("write", None),
    t.MoveOutput: ("mv", None),
    t.DiffOutput: ("diff", None),
    t.Change: ("diff", "Change"),
    t.DiffSummary: ("diff", "DiffSummary"),
    t.MergeReport: ("merge", None),
    t.Conflict: ("merge", "Conflict"),
    t.OpInfo: ("undo", None),
    t.Envelope: ("proxy exec", None),
    t.ExecRequest: ("proxy exec", "ExecRequest"),
    t.Decision: ("proxy exec", "Decision"),
    t.Captured: ("proxy exec", "Captured"),
    t.Confinement: ("proxy exec", "Confinement"),
    t.SandboxReport: ("proxy exec", "SandboxReport"),
    t.SessionRecord: ("session start", None),
    t.StopReport: ("session stop", None),
    t.HandbackReport: ("handback", None),
    t.Grant: ("approvals grant", None),
}


def _object(schema: dict[str, Any], command: str, name: str | None) -> dict[str, Any]:
    data: dict[str, Any] = schema["commands"][command]
    return data if name is None else data["$defs"][name]


def test_every_model_is_checked() -> None:
    models = {c for c in vars(t).values() if dataclasses.is_dataclass(c)}
    assert models == set(MODELS)


@pytest.mark.parametrize("cls", list(MODELS), ids=lambda c: c.__name__)
def test_dataclass_fields_match_schema(cls: type, schema: dict[str, Any]) -> None:
    obj = _object(schema, *MODELS[cls])
    fields = {json_key(f.name): f for f in dataclasses.fields(cls)}
    assert set(fields) == set(obj["properties"]), cls.__name__
    for key, f in fields.items():
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if not has_default:
            assert key in obj.get("required", []), f"{cls.__name__}.{key} is optional in the schema"
        else:
            assert key not in obj.get("required", []) or cls is t.Confinement, (
                f"{cls.__name__}.{key}"
            )


def _inner(tp: Any) -> Any:
    """`X` from `X`, `X | None` or `list[X]`."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (list, typing.Union, types.UnionType):
        return _inner(args[0])
    return tp


@pytest.mark.parametrize("cls", list(MODELS), ids=lambda c: c.__name__)
def test_nested_fields_use_the_referenced_types(cls: type, schema: dict[str, Any]) -> None:
    obj = _object(schema, *MODELS[cls])
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        spec = obj["properties"][json_key(f.name)]
        ref = spec.get("$ref") or spec.get("items", {}).get("$ref")
        if ref:
            name = ref.rsplit("/", 1)[-1]
            assert _inner(hints[f.name]) == getattr(t, name), (cls.__name__, f.name, name)


def test_literal_types_match_schema_enums(schema: dict[str, Any]) -> None:
    defs = schema["commands"]["proxy exec"]["$defs"]
    assert set(typing.get_args(t.Action)) == {v["const"] for v in defs["Action"]["oneOf"]}
    assert set(typing.get_args(t.Category)) == {v["const"] for v in defs["Category"]["oneOf"]}
    assert set(typing.get_args(t.ChangeStatus)) == set(defs["ChangeStatus"]["enum"])


def test_error_classes_cover_every_kind() -> None:
    # Every kind README.md documents has its own class.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("Error kinds:", 1)[1].split("## Exit codes", 1)[0]
    kinds = set(re.findall(r"`([a-z_]+)`", section)) - {
        "suggestions",
        "quota",
        "limit",
        "attempted",
    }
    assert kinds <= set(agentvfs.ERRORS), kinds - set(agentvfs.ERRORS)


def test_validator_catches_a_renamed_key(avfs: agentvfs.Client, validator: Any) -> None:
    avfs.vault_create("proj")
    doc, code = avfs.run_document("vault", "info", "proj")
    doc["data"]["disk_size"] = doc["data"].pop("disk_bytes")  # the 0.1.6 client's kind of bug
    with pytest.raises(jsonschema.ValidationError):
        validator(doc, code)


def test_wheel_is_what_runs(avfs: agentvfs.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The package comes from the venv's site-packages, not from python/src.
    pkg = Path(agentvfs.__file__).resolve().parent
    assert pkg.parent == Path(sysconfig.get_path("purelib")).resolve(), pkg
    assert (pkg / "py.typed").is_file()
    # The binary is the one the wheel put into the environment's scripts directory.
    scripts = Path(sysconfig.get_path("scripts"))
    assert Path(avfs.binary) == scripts / "avfs"
    assert Path(sys.executable).parent == scripts
    out = subprocess.run([avfs.binary, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("avfs ")
    assert avfs.vault_list() == []
    # Overrides: AVFS_BIN, then the constructor argument.
    monkeypatch.setenv("AVFS_BIN", "/bin/true")
    assert agentvfs.Client().binary == "/bin/true"
    assert agentvfs.Client(binary=avfs.binary).binary == avfs.binary


def test_non_json_output_is_a_protocol_error(home: str) -> None:
    c = agentvfs.Client(home=home, binary="/bin/echo")
    with pytest.raises(agentvfs.ProtocolError) as e:
        c.vault_list()
    assert e.value.kind == "protocol"
    assert os.path.isdir(home)
