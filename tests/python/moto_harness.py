"""moto 5.2.5 server on loopback, with the gaps that matter to icestream closed.

Run: python tests/python/moto_harness.py --port N   (or python -m tests.python.moto_harness)
Prints exactly one line "ready http://127.0.0.1:N" on stdout once the server accepts
connections, and stops cleanly on SIGTERM/SIGINT. Binds 127.0.0.1 only.

Gaps of moto 5.2.5 closed here (each patch is applied by apply_patches()):

a. Glue UpdateTable ignores VersionId. moto's GlueResponse.update_table never reads it and
   GlueBackend.update_table always appends a new version, so a stale commit silently wins
   and concurrent Iceberg commits lose snapshots. Patched: GlueResponse.update_table passes
   VersionId on; GlueBackend.update_table compares it with the table's current version
   (FakeTable._current_version) under a lock (the server is threaded) and raises
   ConcurrentModificationException on a mismatch, as AWS does. A match (or no VersionId)
   appends a version via FakeTable.update, which bumps _current_version. GetTable already
   returns the current VersionId (FakeTable.as_dict).
b. S3 Tables GetTable returns managedByService as a JSON boolean; the API model says
   String (the managing service's name), which is what aws-sdk-s3tables parses: a boolean
   fails the call (docs/catalogs.md lists this gap).
   Patched: S3TablesResponse.get_table rewrites the field - omitted when not managed, a
   service name when managed.
c. S3 Tables maintenance configuration (Get/PutTableMaintenanceConfiguration,
   Get/PutTableBucketMaintenanceConfiguration) is not implemented: the URLs are not routed
   and S3TablesResponse has no handlers. Added: routes in moto.s3tables.urls.url_paths,
   handlers on S3TablesResponse and in-memory storage on S3TablesBackend, starting from
   AWS's documented defaults (everything enabled; targetFileSizeMB 512, strategy auto;
   minSnapshotsToKeep 1, maxSnapshotAgeHours 120; unreferencedDays 3, nonCurrentDays 10).
d. S3 Tables UpdateTableMetadataLocation answers `namespace` as a string; the API model says
   a list of strings, so aws-sdk-s3tables cannot parse the answer and every swap that landed
   reads as ambiguous (the commit reloads the table to settle it: a load per commit that AWS
   does not cost). Patched: S3TablesResponse.update_table_metadata_location answers the list.
e. Glue table optimizers (Create/Update/GetTableOptimizer) are not implemented. Added, as our
   own emulation for tests only (moto_glue_optimizers.py): a stored configuration per
   (catalog, database, table, type), AlreadyExists / EntityNotFound as AWS documents; the
   optimizers never run.
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import socket
import sys
import threading
from typing import Any
from urllib.parse import unquote

from moto.core.exceptions import JsonRESTError
from moto.core.responses import EmptyResult
from moto.glue.models import GlueBackend
from moto.glue.responses import GlueResponse
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.s3tables import urls as s3tables_urls
from moto.s3tables.exceptions import BadRequestException
from moto.s3tables.models import S3TablesBackend
from moto.s3tables.responses import S3TablesResponse

import moto_glue_optimizers

HOST = "127.0.0.1"

# ---------------------------------------------------------------- a. Glue VersionId

_GLUE_COMMIT_LOCK = threading.Lock()  # check-and-swap must be atomic across server threads


class ConcurrentModificationException(JsonRESTError):
    code = 400

    def __init__(self, message: str) -> None:
        super().__init__("ConcurrentModificationException", message)


def _glue_backend_update_table(
    self: GlueBackend,
    database_name: str,
    table_name: str,
    table_input: dict[str, Any],
    version_id: str | None = None,
) -> None:
    with _GLUE_COMMIT_LOCK:
        table = self.get_table(database_name, table_name)
        current = str(table._current_version)
        if version_id is not None and str(version_id) != current:
            raise ConcurrentModificationException(
                f"Update table failed due to concurrent modifications: VersionId "
                f"{version_id} is not the current version {current} of table {table_name}"
            )
        table.update(table_input)


def _glue_response_update_table(self: GlueResponse) -> Any:
    table_input = self.parameters.get("TableInput")
    self.glue_backend.update_table(
        self.parameters.get("DatabaseName"),
        table_input.get("Name"),
        table_input,
        version_id=self.parameters.get("VersionId"),
    )
    return EmptyResult()


# ---------------------------------------------------------------- b. managedByService

_original_s3tables_get_table = S3TablesResponse.get_table
MANAGING_SERVICE = "s3tables.amazonaws.com"  # stand-in name for moto's managed=True tables


def _s3tables_get_table(self: S3TablesResponse) -> Any:
    status, headers, body = _original_s3tables_get_table(self)
    doc = json.loads(body)
    managed = doc.pop("managedByService", None)
    if isinstance(managed, str):
        doc["managedByService"] = managed
    elif managed:
        doc["managedByService"] = MANAGING_SERVICE
    return status, headers, json.dumps(doc)


# ---------------------------------------------------------------- d. namespace as a list

_original_update_metadata_location = S3TablesResponse.update_table_metadata_location


def _s3tables_update_metadata_location(self: S3TablesResponse) -> Any:
    status, headers, body = _original_update_metadata_location(self)
    doc = json.loads(body)
    if isinstance(doc.get("namespace"), str):
        doc["namespace"] = [doc["namespace"]]
    return status, headers, json.dumps(doc)


# ---------------------------------------------------------------- c. maintenance config

def _config(kind: str, status: str = "enabled", **settings: Any) -> dict[str, Any]:
    return {"status": status, "settings": {kind: settings}}


TABLE_DEFAULTS = {
    "icebergCompaction": _config("icebergCompaction", targetFileSizeMB=512, strategy="auto"),
    "icebergSnapshotManagement": _config(
        "icebergSnapshotManagement", minSnapshotsToKeep=1, maxSnapshotAgeHours=120
    ),
}
BUCKET_DEFAULTS = {
    "icebergUnreferencedFileRemoval": _config(
        "icebergUnreferencedFileRemoval", unreferencedDays=3, nonCurrentDays=10
    ),
}
# Per-setting validation: an inclusive (min, max) for integers, or the allowed strings.
_POSITIVE = (1, 2**31 - 1)
SETTING_RULES: dict[str, Any] = {
    "targetFileSizeMB": (64, 512), "strategy": {"auto", "binpack", "sort", "z-order"},
    "minSnapshotsToKeep": _POSITIVE, "maxSnapshotAgeHours": _POSITIVE,
    "unreferencedDays": _POSITIVE, "nonCurrentDays": _POSITIVE,
}


def _merged_value(
    kind: str, value: Any, current: dict[str, Any], defaults: dict[str, Any]
) -> dict[str, Any]:
    """Validate a Put's `value` for maintenance type `kind`; return the stored form.

    Settings left out keep their current value, so a Put that only flips status is safe.
    """
    if kind not in defaults:
        raise BadRequestException(f"Invalid maintenance configuration type: {kind}")
    if not isinstance(value, dict):
        raise BadRequestException("value is required")
    status = value.get("status", current["status"])
    if status not in ("enabled", "disabled"):
        raise BadRequestException(f"Invalid status: {status}")
    settings = value.get("settings") or {}
    if set(settings) - {kind}:  # a union: only the member named by the type is allowed
        raise BadRequestException(f"Settings for {sorted(settings)} do not match type {kind}")
    merged = copy.deepcopy(current["settings"][kind])
    for key, val in (settings.get(kind) or {}).items():
        rule = SETTING_RULES.get(key)
        if rule is None or key not in defaults[kind]["settings"][kind]:
            raise BadRequestException(f"Unknown setting {key} for {kind}")
        ok = val in rule if isinstance(rule, set) else (
            isinstance(val, int) and rule[0] <= val <= rule[1]
        )
        if not ok:
            raise BadRequestException(f"Invalid value {val!r} for {kind}.{key}")
        merged[key] = val
    return {"status": status, "settings": {kind: merged}}


def _maintenance_of(obj: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    # Stored on moto's Table / FakeTableBucket objects so it dies with them.
    if not hasattr(obj, "icestream_maintenance"):
        obj.icestream_maintenance = copy.deepcopy(defaults)
    return obj.icestream_maintenance


def _backend_get_table_maintenance(self: S3TablesBackend, bucket_arn: str, ns: str, name: str):
    table = self.get_table(bucket_arn, ns, name)
    return table.arn, copy.deepcopy(_maintenance_of(table, TABLE_DEFAULTS))


def _backend_put_table_maintenance(
    self: S3TablesBackend, bucket_arn: str, ns: str, name: str, kind: str, value: Any
) -> None:
    config = _maintenance_of(self.get_table(bucket_arn, ns, name), TABLE_DEFAULTS)
    config[kind] = _merged_value(kind, value, config.get(kind, {}), TABLE_DEFAULTS)


def _backend_get_bucket_maintenance(self: S3TablesBackend, bucket_arn: str):
    bucket = self.get_table_bucket(bucket_arn)
    return bucket.arn, copy.deepcopy(_maintenance_of(bucket, BUCKET_DEFAULTS))


def _backend_put_bucket_maintenance(
    self: S3TablesBackend, bucket_arn: str, kind: str, value: Any
) -> None:
    config = _maintenance_of(self.get_table_bucket(bucket_arn), BUCKET_DEFAULTS)
    config[kind] = _merged_value(kind, value, config.get(kind, {}), BUCKET_DEFAULTS)


def _uri(self: S3TablesResponse, name: str) -> str:
    # Path parameters as matched by moto's botocore-model router (percent-encoded ARN).
    return unquote(self.uri_match[name])


def _body_value(self: S3TablesResponse) -> Any:
    try:
        return json.loads(self.body or "{}").get("value")
    except ValueError:
        raise BadRequestException("Request body is not valid JSON")


def _resp_get_table_maintenance(self: S3TablesResponse) -> Any:
    arn, config = self.s3tables_backend.get_table_maintenance_configuration(
        _uri(self, "tableBucketARN"), _uri(self, "namespace"), _uri(self, "name")
    )
    body = json.dumps({"tableARN": arn, "configuration": config})
    return 200, self.default_response_headers, body


def _resp_put_table_maintenance(self: S3TablesResponse) -> Any:
    self.s3tables_backend.put_table_maintenance_configuration(
        _uri(self, "tableBucketARN"), _uri(self, "namespace"), _uri(self, "name"),
        _uri(self, "type"), _body_value(self),
    )
    return 204, {"status": 204}, ""  # moto reads the status from headers only


def _resp_get_bucket_maintenance(self: S3TablesResponse) -> Any:
    arn, config = self.s3tables_backend.get_table_bucket_maintenance_configuration(
        _uri(self, "tableBucketARN")
    )
    body = json.dumps({"tableBucketARN": arn, "configuration": config})
    return 200, self.default_response_headers, body


def _resp_put_bucket_maintenance(self: S3TablesResponse) -> Any:
    self.s3tables_backend.put_table_bucket_maintenance_configuration(
        _uri(self, "tableBucketARN"), _uri(self, "type"), _body_value(self)
    )
    return 204, {"status": 204}, ""  # moto reads the status from headers only


# Flask routes; the ARN arrives either percent-encoded (one segment) or with its "/" decoded
# (two segments), which is why moto's own table has the same *_pt_1/_pt_2 pairs.
_ARN1 = r"(?P<tableBucketARN>[^/]+)"
_ARN2 = r"(?P<tableBucketARN_pt_1>[^/]+)/(?P<tableBucketARN_pt_2>[^/]+)"
_TBL = r"/(?P<namespace>[^/]+)/(?P<name>[^/]+)"
MAINTENANCE_URL_PATHS = [
    "{0}/buckets/" + arn + "/maintenance" + tail
    for arn in (_ARN1, _ARN2) for tail in ("$", r"/(?P<type>[^/]+)$")
] + [
    "{0}/tables/" + arn + _TBL + "/maintenance" + tail
    for arn in (_ARN1, _ARN2) for tail in ("$", r"/(?P<type>[^/]+)$")
]


# ---------------------------------------------------------------- wiring

def apply_patches() -> None:
    """Install every patch above into the imported moto modules (idempotent)."""
    GlueBackend.update_table = _glue_backend_update_table
    GlueResponse.update_table = _glue_response_update_table
    S3TablesResponse.get_table = _s3tables_get_table
    S3TablesResponse.update_table_metadata_location = _s3tables_update_metadata_location
    S3TablesBackend.get_table_maintenance_configuration = _backend_get_table_maintenance
    S3TablesBackend.put_table_maintenance_configuration = _backend_put_table_maintenance
    S3TablesBackend.get_table_bucket_maintenance_configuration = _backend_get_bucket_maintenance
    S3TablesBackend.put_table_bucket_maintenance_configuration = _backend_put_bucket_maintenance
    S3TablesResponse.get_table_maintenance_configuration = _resp_get_table_maintenance
    S3TablesResponse.put_table_maintenance_configuration = _resp_put_table_maintenance
    S3TablesResponse.get_table_bucket_maintenance_configuration = _resp_get_bucket_maintenance
    S3TablesResponse.put_table_bucket_maintenance_configuration = _resp_put_bucket_maintenance
    for path in MAINTENANCE_URL_PATHS:
        s3tables_urls.url_paths[path] = S3TablesResponse.dispatch
    moto_glue_optimizers.apply()


def _port_is_free(port: int) -> bool:
    # ThreadedMotoServer.start() waits forever if its bind fails, so find out first.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
            return True
        except OSError:
            return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--unpatched", action="store_true",
        help="serve plain moto (only to show that the tests catch moto's gaps)",
    )
    args = parser.parse_args(argv)
    if not _port_is_free(args.port):
        print(f"port {HOST}:{args.port} is in use", file=sys.stderr)
        return 1
    if not args.unpatched:
        apply_patches()

    server = ThreadedMotoServer(ip_address=HOST, port=args.port, verbose=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()  # returns once the socket is bound and listening
    with socket.create_connection((HOST, args.port), timeout=5):
        pass  # prove it: the announced endpoint really accepts connections
    print(f"ready http://{HOST}:{args.port}", flush=True)
    while not stop.wait(0.5):  # short waits keep signal delivery prompt
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
