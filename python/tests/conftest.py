"""Fixtures: a fresh AVFS_HOME per test and a client whose every document is validated
against the repository's schema/avfs.schema.json."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentvfs import Client

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schema" / "avfs.schema.json"


@pytest.fixture(scope="session")
def schema() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return doc


class SchemaValidator:
    """`on_document` hook: every document must match `envelope`, and `data` must match
    `commands[command]`. Remembers the last exit code for the proxy tests."""

    def __init__(self, schema: dict[str, Any]) -> None:
        cls = jsonschema.Draft202012Validator
        self.envelope = cls(schema["envelope"])
        self.commands = {name: cls(s) for name, s in schema["commands"].items()}
        self.count = 0
        self.last_exit_code: int | None = None

    def __call__(self, doc: dict[str, Any], exit_code: int) -> None:
        self.envelope.validate(doc)
        command = doc["command"]
        if doc["ok"]:
            assert command in self.commands, f"no schema for command {command!r}"
            self.commands[command].validate(doc["data"])
            assert exit_code == 0 or command == "proxy exec", (command, exit_code)
        else:
            assert exit_code != 0, doc
        self.count += 1
        self.last_exit_code = exit_code


@pytest.fixture
def validator(schema: dict[str, Any]) -> SchemaValidator:
    return SchemaValidator(schema)


@pytest.fixture
def home() -> Iterator[str]:
    # Short, so session sockets stay well under the 108-byte limit.
    d = tempfile.mkdtemp(prefix="avfs-py-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def avfs(
    home: str, validator: SchemaValidator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Client]:
    for var in ("AVFS_WORKSPACE", "AVFS_VAULT", "AVFS_BIN"):
        monkeypatch.delenv(var, raising=False)
    yield Client(home=home, on_document=validator)
    assert validator.count > 0, "no document went through the schema validator"


@pytest.fixture
def vault(avfs: Client) -> Client:
    """A client on a fresh vault `proj` holding /a.txt."""
    avfs.vault_create("proj")
    proj = avfs.with_workspace("proj")
    proj.write("/a.txt", "one\n")
    return proj


@pytest.fixture
def fuse() -> None:
    """The proxy and sessions need /dev/fuse: fail without it, unless the run says so."""
    if os.path.exists("/dev/fuse"):
        return
    if os.environ.get("AVFS_CI_ALLOW_NO_FUSE") == "1":
        pytest.skip("/dev/fuse missing (AVFS_CI_ALLOW_NO_FUSE=1): FUSE test not run")
    pytest.fail("/dev/fuse is missing; set AVFS_CI_ALLOW_NO_FUSE=1 to skip the FUSE tests")
