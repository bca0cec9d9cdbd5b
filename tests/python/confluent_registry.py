"""A stand-in for a Confluent-compatible schema registry, for tests.

No Confluent Schema Registry server installs from the package registries this project can
reach, so the tests serve the part of its REST API that producers and icestream use, with the
registry's own semantics: one id per distinct schema (shared across subjects), versions per
subject in registration order, the Confluent error bodies (`error_code` 40401 / 40403).

Routes:
- POST /subjects/{subject}/versions            register {"schema", "schemaType", "references"} -> {"id"}
- POST /subjects/{subject}                     look a schema up -> {"subject", "id", "version", "schema"}
- GET  /schemas/ids/{id}                       {"schema", "schemaType", "references"} (schemaType absent for AVRO)
- GET  /schemas/ids/{id}/versions              [{"subject", "version"}]: where the id is registered
- GET  /subjects/{subject}/versions/latest     {"subject", "id", "version", "schema", "schemaType"}
- GET  /subjects/{subject}/versions/{n}        the same for version n
- GET  /subjects                               subject names

Schemas are stored as registered (confluent-kafka's Protobuf serializer registers a base64
FileDescriptorProto, which a real registry also serves with `format=serialized`). With
`auth="user:password"` every request needs that HTTP basic auth (401 otherwise). `requests`
counts what was served per route, so tests can assert on cache behaviour.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse


class ConfluentRegistry:
    def __init__(self, port: int = 0, auth: str | None = None) -> None:
        self.schemas: list[dict[str, Any]] = []  # index + 1 = id
        self.subjects: dict[str, list[int]] = {}
        self.auth = auth
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = port

    # --- lifecycle ---
    def start(self) -> "ConfluentRegistry":
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                registry._handle(self, "GET")

            def do_POST(self) -> None:
                registry._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- the registry ---
    def register(self, subject: str, schema: str, schema_type: str = "AVRO", references: list | None = None) -> int:
        entry = {"schema": schema, "schemaType": schema_type, "references": references or []}
        with self._lock:
            if entry in self.schemas:
                schema_id = self.schemas.index(entry) + 1
            else:
                self.schemas.append(entry)
                schema_id = len(self.schemas)
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def _version(self, subject: str, n: int) -> dict[str, Any]:
        schema_id = self.subjects[subject][n - 1]
        entry = self.schemas[schema_id - 1]
        body = {"subject": subject, "id": schema_id, "version": n, "schema": entry["schema"], "references": entry["references"]}
        if entry["schemaType"] != "AVRO":
            body["schemaType"] = entry["schemaType"]
        return body

    def _handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        path = urlparse(req.path).path.rstrip("/")
        parts = [unquote(p) for p in path.split("/")[1:]]
        if self.auth is not None:
            expected = "Basic " + base64.b64encode(self.auth.encode()).decode()
            if req.headers.get("Authorization") != expected:
                return self._reply(req, 401, {"error_code": 401, "message": "Unauthorized"})
        body: dict[str, Any] = {}
        if method == "POST":
            length = int(req.headers.get("Content-Length") or 0)
            body = json.loads(req.rfile.read(length) or b"{}")
        route = f"{method} /{parts[0] if parts else ''}"
        with self._lock:
            self.requests[route] += 1
        try:
            if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
                schema_id = int(parts[2])
                if not 1 <= schema_id <= len(self.schemas):
                    return self._reply(req, 404, {"error_code": 40403, "message": "Schema not found"})
                entry = self.schemas[schema_id - 1]
                out = {"schema": entry["schema"], "references": entry["references"]}
                if entry["schemaType"] != "AVRO":
                    out["schemaType"] = entry["schemaType"]
                return self._reply(req, 200, out)
            if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 4 and parts[3] == "versions":
                schema_id = int(parts[2])
                if not 1 <= schema_id <= len(self.schemas):
                    return self._reply(req, 404, {"error_code": 40403, "message": "Schema not found"})
                found = [{"subject": s, "version": ids.index(schema_id) + 1} for s, ids in sorted(self.subjects.items()) if schema_id in ids]
                return self._reply(req, 200, found)
            if method == "GET" and parts == ["subjects"]:
                return self._reply(req, 200, sorted(self.subjects))
            if parts[:1] == ["subjects"] and len(parts) >= 2:
                subject = parts[1]
                if method == "POST" and len(parts) == 3 and parts[2] == "versions":
                    schema_id = self.register(subject, body["schema"], body.get("schemaType", "AVRO"), body.get("references"))
                    return self._reply(req, 200, {"id": schema_id})
                if subject not in self.subjects:
                    return self._reply(req, 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."})
                if method == "POST" and len(parts) == 2:
                    entry = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"), "references": body.get("references") or []}
                    if entry not in self.schemas or self.schemas.index(entry) + 1 not in self.subjects[subject]:
                        return self._reply(req, 404, {"error_code": 40403, "message": "Schema not found"})
                    n = self.subjects[subject].index(self.schemas.index(entry) + 1) + 1
                    return self._reply(req, 200, self._version(subject, n))
                if method == "GET" and len(parts) == 4 and parts[2] == "versions":
                    versions = self.subjects[subject]
                    n = len(versions) if parts[3] == "latest" else int(parts[3])
                    if not 1 <= n <= len(versions):
                        return self._reply(req, 404, {"error_code": 40402, "message": "Version not found."})
                    return self._reply(req, 200, self._version(subject, n))
            return self._reply(req, 404, {"error_code": 404, "message": f"no route {method} {path}"})
        except (KeyError, ValueError) as e:
            return self._reply(req, 422, {"error_code": 42201, "message": f"bad request: {e}"})

    @staticmethod
    def _reply(req: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)
