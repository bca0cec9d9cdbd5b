"""Independent Iceberg readers, used by tests and scripts to check what icestream writes.

None of these share code with the Rust writer: PyIceberg and DuckDB each parse the metadata,
manifests and Parquet files themselves, so agreement between them is real evidence.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

CATALOG_NAME = "icestream"  # the embedded catalog's name: LOCAL_CATALOG_NAME in shared/src/engine/catalog.rs


def _local_path(location: str) -> str:
    """file:///x/y -> /x/y (DuckDB and sqlite want plain paths); other strings unchanged."""
    if location.startswith("file:"):
        return unquote(urlparse(location).path)
    return location


def _warehouse_dir(warehouse: str | os.PathLike[str]) -> Path:
    return Path(_local_path(os.fspath(warehouse))).resolve()


def pyiceberg_sql_catalog(warehouse: str | os.PathLike[str]) -> Any:
    """PyIceberg SqlCatalog over <warehouse>/catalog.db: the embedded catalog's layout."""
    from pyiceberg.catalog.sql import SqlCatalog

    root = _warehouse_dir(warehouse)
    return SqlCatalog(
        CATALOG_NAME,
        uri=f"sqlite:///{root}/catalog.db",
        warehouse=f"file://{root}",
    )


def pyiceberg_sql_table(warehouse: str | os.PathLike[str], namespace: str, table: str) -> Any:
    """Load `namespace.table` from the embedded SQLite catalog (a pyiceberg Table)."""
    return pyiceberg_sql_catalog(warehouse).load_table((namespace, table))


def pyiceberg_glue_catalog(endpoint: str) -> Any:
    """PyIceberg Glue catalog whose Glue and S3 calls all go to `endpoint` (local moto)."""
    from pyiceberg.catalog import load_catalog

    key = os.environ.get("AWS_ACCESS_KEY_ID", "test")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "test")
    region = os.environ.get("AWS_REGION", "us-east-1")
    return load_catalog(
        CATALOG_NAME,
        **{
            "type": "glue",
            "glue.endpoint": endpoint,
            "glue.region": region,
            "glue.access-key-id": key,
            "glue.secret-access-key": secret,
            "s3.endpoint": endpoint,
            "s3.region": region,
            "s3.access-key-id": key,
            "s3.secret-access-key": secret,
            # Path-style (http://host/bucket/key): a local server has no per-bucket DNS.
            "s3.force-virtual-addressing": "false",
        },
    )


def pyiceberg_glue_table(endpoint: str, namespace: str, table: str) -> Any:
    """Load `namespace.table` through the Glue catalog at `endpoint` (a pyiceberg Table)."""
    return pyiceberg_glue_catalog(endpoint).load_table((namespace, table))


def _duckdb_extension(module_name: str, extension: str, version: str) -> Path:
    import importlib

    module = importlib.import_module(module_name)
    path = Path(module.__file__).parent / "extensions" / f"v{version}" / f"{extension}.duckdb_extension"
    if not path.is_file():
        raise FileNotFoundError(f"{path} (does {module_name} match duckdb {version}?)")
    return path


def duckdb_connect() -> Any:
    """DuckDB with iceberg + avro loaded from their PyPI wheels, never from the internet."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": "false"})
    for module_name, extension in (
        ("duckdb_extension_avro", "avro"),
        ("duckdb_extension_iceberg", "iceberg"),
    ):
        path = _duckdb_extension(module_name, extension, duckdb.__version__)
        con.execute(f"LOAD '{path}'")
    return con


def duckdb_scan(metadata_json_path: str | os.PathLike[str], sql_tail: str = "") -> Any:
    """All rows of the table whose current metadata file is `metadata_json_path`.

    Returns a pyarrow.Table. `sql_tail` is appended to the query (e.g. "ORDER BY id").
    """
    path = _local_path(os.fspath(metadata_json_path)).replace("'", "''")
    con = duckdb_connect()
    try:
        return con.execute(f"SELECT * FROM iceberg_scan('{path}') {sql_tail}").to_arrow_table()
    finally:
        con.close()


def metadata_location_sql(warehouse: str | os.PathLike[str], namespace: str, table: str) -> str:
    """Current metadata location of `namespace.table`, read straight from catalog.db.

    Reads the JDBC/PyIceberg layout (iceberg_tables: catalog_name, table_namespace,
    table_name, metadata_location) with plain sqlite3, so it checks the Rust SQL catalog's
    rows without any Iceberg library in between. Raises KeyError if there is no such row.
    """
    db = _warehouse_dir(warehouse) / "catalog.db"
    # Read-only URI: a reader must never create or lock the writer's catalog.
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        rows = con.execute(
            "SELECT metadata_location FROM iceberg_tables"
            " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
            (CATALOG_NAME, namespace, table),
        ).fetchall()
    if len(rows) != 1:
        raise KeyError(f"{CATALOG_NAME}.{namespace}.{table}: {len(rows)} rows in {db}")
    return rows[0][0]
