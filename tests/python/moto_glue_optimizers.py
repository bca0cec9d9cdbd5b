"""Our emulation of the Glue Data Catalog's table optimizers, for tests only (moto_harness.py e.).

moto 5.2.5 has no CreateTableOptimizer, UpdateTableOptimizer or GetTableOptimizer: its Glue
responder answers them as not implemented. This is a minimal model of what AWS documents, and
no more: one stored configuration per (catalog, database, table, type); the table must exist
(EntityNotFoundException otherwise, as for any Glue table call); Create of one that exists is
AlreadyExistsException, Update of one that does not is EntityNotFoundException, Get returns it
as stored (TableOptimizer: type, configuration). The optimizers never run here: what they would
do to a table is AWS's, and no test relies on it.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from moto.core.responses import ActionResult, EmptyResult
from moto.glue.exceptions import AlreadyExistsException, EntityNotFoundException, GlueClientError
from moto.glue.models import GlueBackend
from moto.glue.responses import GlueResponse

TYPES = ("compaction", "retention", "orphan_file_deletion")
_LOCK = threading.Lock()  # the server is threaded: a create must not race a create


class InvalidInputException(GlueClientError):
    def __init__(self, message: str) -> None:
        super().__init__("InvalidInputException", message)


def _store(backend: GlueBackend) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    if not hasattr(backend, "icestream_table_optimizers"):
        backend.icestream_table_optimizers = {}
    return backend.icestream_table_optimizers


def _key(backend: GlueBackend, catalog: str, database: str, table: str, kind: str) -> tuple[str, str, str, str]:
    if kind not in TYPES:
        raise InvalidInputException(f"Invalid table optimizer type {kind!r}: one of {', '.join(TYPES)}")
    if catalog != backend.account_id:
        raise EntityNotFoundException(f"Catalog {catalog} not found")
    backend.get_table(database, table)  # TableNotFoundException / DatabaseNotFoundException
    return catalog, database, table, kind


def _configuration(params: dict[str, Any]) -> dict[str, Any]:
    config = params.get("TableOptimizerConfiguration")
    if not isinstance(config, dict) or not config.get("roleArn"):
        raise InvalidInputException("TableOptimizerConfiguration with a roleArn is required")
    return copy.deepcopy(config)


def _args(self: GlueResponse) -> tuple[str, str, str, str]:
    p = self.parameters
    return p.get("CatalogId"), p.get("DatabaseName"), p.get("TableName"), p.get("Type")


def create_table_optimizer(self: GlueResponse) -> Any:
    backend = self.glue_backend
    with _LOCK:
        key = _key(backend, *_args(self))
        if key in _store(backend):
            raise AlreadyExistsException(f"Table optimizer {key[3]} of {key[1]}.{key[2]}")
        _store(backend)[key] = _configuration(self.parameters)
    return EmptyResult()


def update_table_optimizer(self: GlueResponse) -> Any:
    backend = self.glue_backend
    with _LOCK:
        key = _key(backend, *_args(self))
        if key not in _store(backend):
            raise EntityNotFoundException(f"Table optimizer {key[3]} of {key[1]}.{key[2]} not found")
        _store(backend)[key] = _configuration(self.parameters)
    return EmptyResult()


def get_table_optimizer(self: GlueResponse) -> Any:
    backend = self.glue_backend
    with _LOCK:
        key = _key(backend, *_args(self))
        config = _store(backend).get(key)
    if config is None:
        raise EntityNotFoundException(f"Table optimizer {key[3]} of {key[1]}.{key[2]} not found")
    return ActionResult({
        "CatalogId": key[0], "DatabaseName": key[1], "TableName": key[2],
        "TableOptimizer": {"type": key[3], "configuration": copy.deepcopy(config)},
    })


def apply() -> None:
    GlueResponse.create_table_optimizer = create_table_optimizer
    GlueResponse.update_table_optimizer = update_table_optimizer
    GlueResponse.get_table_optimizer = get_table_optimizer
