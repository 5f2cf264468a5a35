"""An OTLP/HTTP traces collector on loopback for the tests: each export
request is decoded with opentelemetry-proto's published definitions and
appended to OUT as one JSON line. Mode `hang` reads a request and never
answers it (for two minutes), marking OUT.hung when reached and
OUT.answered if it ever ends.

usage: otlp_collector.py PORT OUT ok|hang   (PORT 0: any; OUT.port says it)
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

PORT, OUT, MODE = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


def span(s):
    return {
        "trace_id": s.trace_id.hex(),
        "span_id": s.span_id.hex(),
        "parent": s.parent_span_id.hex(),
        "trace_state": s.trace_state,
        "name": s.name,
        "kind": s.kind,
        "start": s.start_time_unix_nano,
        "end": s.end_time_unix_nano,
        "attributes": attributes(s.attributes),
        "status": s.status.code,
        "flags": s.flags,
        "links": [
            {"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()} for l in s.links
        ],
    }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        if MODE == "hang":
            open(OUT + ".hung", "w").close()
            time.sleep(120)
            open(OUT + ".answered", "w").close()
            return
        request = ExportTraceServiceRequest.FromString(body)
        record = {
            "path": self.path,
            "content_type": self.headers["content-type"],
            "authorization": self.headers.get("authorization"),
            "resources": [],
        }
        for resource_spans in request.resource_spans:
            record["resources"].append(
                {
                    "attributes": attributes(resource_spans.resource.attributes),
                    "scopes": [
                        {
                            "name": scope_spans.scope.name,
                            "spans": [span(s) for s in scope_spans.spans],
                        }
                        for scope_spans in resource_spans.scope_spans
                    ],
                }
            )
        with open(OUT, "a") as out:
            out.write(json.dumps(record) + "\n")
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True
with open(OUT + ".port.tmp", "w") as port:
    port.write(str(server.server_address[1]))
os.rename(OUT + ".port.tmp", OUT + ".port")
server.serve_forever()
