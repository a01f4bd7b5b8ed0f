"""A stand-in for Prometheus's instant-query API over the emulator's ``/metrics``, run in its own process by
``analysis_cost.py`` (so its CPU is not the analysis's): ``python bench/promql_stub.py <metrics url>``
prints its base URL, then answers ``GET /api/v1/query`` for the error-rate query

``sum by (name) (rate(<errors>[..])) / sum by (name) (rate(<requests>[..]))``

as Prometheus would over the window since its previous scrape (one scrape per query), and ``GET /count``
with the number of queries it answered. Real Prometheus runs in the end-to-end tests.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx

QUERY = re.compile(r"sum by \(name\) \(rate\((\w+)\[\w+\]\)\) / sum by \(name\) \(rate\((\w+)\[\w+\]\)\)")
SAMPLE = re.compile(r'^(\w+)\{name="([^"]*)",[^}]*\} (\S+)$')


class Stub:
    """The stub's state: the previous scrape and the number of queries answered."""

    def __init__(self, metrics_url: str) -> None:
        self.metrics_url = metrics_url
        self.lock = threading.Lock()
        self.queries = 0
        self.previous = self.scrape()

    def scrape(self) -> dict[tuple[str, str], float]:
        totals: dict[tuple[str, str], float] = defaultdict(float)
        for line in httpx.get(self.metrics_url, timeout=30).text.splitlines():
            match = SAMPLE.match(line)
            if match:
                totals[(match.group(1), match.group(2))] += float(match.group(3))
        return totals

    def answer(self, query: str) -> tuple[int, dict[str, object]]:
        match = QUERY.fullmatch(query)
        if match is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": "only the error-rate query is emulated"}
        errors, requests = match.groups()
        with self.lock:
            self.queries += 1
            now = self.scrape()
            result = []
            for metric, name in now:
                if metric != requests:
                    continue
                made = now[(requests, name)] - self.previous.get((requests, name), 0.0)
                if made > 0:
                    failed = now.get((errors, name), 0.0) - self.previous.get((errors, name), 0.0)
                    result.append({"metric": {"name": name}, "value": [time.time(), str(failed / made)]})
            self.previous = now
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


def main() -> None:
    stub = Stub(sys.argv[1])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/count":
                status, body = 200, {"queries": stub.queries}
            elif parts.path == "/api/v1/query":
                status, body = stub.answer(parse_qs(parts.query).get("query", [""])[0])
            else:
                status, body = 404, {"status": "error", "error": "not found"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
