"""Helpers of the reliability suite: distinctive secrets, recorded sleeps, DAG runs, TLS material, a stub
HTTP server, and scanners for what Airflow persisted."""

from __future__ import annotations

import asyncio
import copy
import datetime
import ipaddress
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

# Distinctive values: none of them may appear anywhere Airflow persists or prints.
API_KEY = "ak-Reliability-ApiKey-6c0f2a94d1"
WRONG_API_KEY = "ak-Reliability-WrongKey-93be70c4"
PAYMENT_TOKEN = "pt-Reliability-PaymentToken-3b8e5d17"
SEEDED_SECRET_PREFIX = "sv-Reliability-Seeded-"
"""Prefix of the secret values seeded into every emulator deployment (the service echoes them)."""
OPERATOR_SECRET = "os-Reliability-LiteralSecret-5a2c9e"
VARIABLE_SECRET = "vs-Reliability-VariableSecret-0d7f4b"

FAST_RETRY_EXTRAS: dict[str, Any] = {"backoff_initial": 0.05, "backoff_max": 0.2}
"""Connection extras that keep real backoff waits short in ``dag.test()`` runs."""

FLEET = {
    "checkout-api-dev": ("repo_ref", "v{version}"),
    "search-staging": ("image_uri", "registry.example.com/acme/acme-release:{version}"),
    "catalog-graph-dev": ("source_tarball_path", "uploads/acme-release/{version}.tar.gz"),
    "checkout-api-prod": ("repo_ref", "v{version}"),
    "support-bot-prod": ("repo_ref", "v{version}"),
}
"""The deployments ``deploy_fleet_after_build`` rolls out to, and the field each one gets."""

CONN_ENV = "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT"
LIST_ROUTE = "GET /v2/deployments"
PATCH_ROUTE = "PATCH /v2/deployments/{deployment_id}"


def connection_json(base_url: str, api_key: str, **extra: Any) -> str:
    """The JSON form of a ``deployment_service`` connection, as users put it in an env var."""
    from airflow_provider.emulator.tracing import tracing_base_url

    extra = {"tracing_base_url": tracing_base_url(base_url), **extra}  # the emulator's tracing endpoints
    return json.dumps({"conn_type": "deployment_service", "host": base_url, "password": api_key, "extra": extra})


# -------------------------------------------------------------------------------------------- report
class Report:
    """Rows per table plus headline counters, collected across the session."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.headline: dict[str, int] = {}
        self.notes: dict[str, str] = {}

    def row(self, table: str, **values: Any) -> None:
        """Add one row to ``table`` (column order is the keyword order)."""
        self.rows.append({"table": table, **values})

    def add(self, counter: str, amount: int = 1) -> None:
        """Add ``amount`` to a headline counter."""
        self.headline[counter] = self.headline.get(counter, 0) + amount

    def note(self, key: str, text: str) -> None:
        """A free-text fact for the rendered report (e.g. the retry settings used)."""
        self.notes[key] = text


# ------------------------------------------------------------------------------------ recorded sleeps
class CountedRequests:
    """Requests the client started on one endpoint (``method`` and exact ``path``), counted on the client's side.

    The emulator counts a request when its handler thread gets to it; on a loaded machine a client can time out
    and go on to its backoff wait before that thread ran, so a wait would seem to come before the request it
    follows. Counted here, a request is counted before it leaves. Pass :meth:`transport` (or
    :meth:`async_transport`) as the client's ``transport=``; they pool connections as the client's own would.
    """

    def __init__(self, method: str, path: str) -> None:
        self.method, self.path, self.sent = method, path, 0

    def _count(self, request: httpx.Request) -> None:
        if request.method == self.method and request.url.path == self.path:
            self.sent += 1

    def transport(self) -> httpx.BaseTransport:
        counted = self

        class Counting(httpx.HTTPTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                counted._count(request)
                return super().handle_request(request)

        return Counting(limits=httpx.Limits(max_connections=20, max_keepalive_connections=10))

    def async_transport(self) -> httpx.AsyncBaseTransport:
        counted = self

        class Counting(httpx.AsyncHTTPTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                counted._count(request)
                return await super().handle_async_request(request)

        return Counting(limits=httpx.Limits(max_connections=20, max_keepalive_connections=10))


@dataclass
class RecordedSleeps:
    """A ``sleep=`` for the client that records each wait and how many requests the emulator had counted
    at that moment, so a test can tell which request each wait came before. It never sleeps unless
    ``real`` (for a fault the emulator times in real seconds, such as a request processed late)."""

    requests_so_far: Callable[[], int] = lambda: 0
    waits: list[tuple[float, int]] = field(default_factory=list)
    real: bool = False

    def __call__(self, seconds: float) -> None:
        self.waits.append((seconds, self.requests_so_far()))
        if self.real:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """The asyncio twin."""
        self.waits.append((seconds, self.requests_so_far()))
        if self.real:
            await asyncio.sleep(seconds)

    @property
    def delays(self) -> list[float]:
        return [delay for delay, _ in self.waits]


def wait_for_faulted_request(state: Any, fault: str, within: float = 5.0) -> dict[str, Any]:
    """The request log's last entry faulted with ``fault`` (e.g. ``late``), once the emulator has answered it."""
    deadline = time.monotonic() + within
    while True:
        found = [record for record in state.request_log if record.fault == fault]
        if found:
            entry: dict[str, Any] = found[-1].to_json()
            return entry
        if time.monotonic() > deadline:
            shown = [record.to_json() for record in state.request_log]
            raise AssertionError(f"no {fault!r} request answered within {within} s; requests: {shown}")
        time.sleep(0.02)


def example_data_with_secrets() -> dict[str, Any]:
    """The shipped example data, every deployment holding a distinctive secret value the service echoes."""
    from airflow_provider.emulator.seed import example_data_path

    data: dict[str, Any] = json.loads(example_data_path().read_text())
    data = copy.deepcopy(data)
    for index, deployment in enumerate(data["deployments"]):
        deployment["secrets"] = [{"name": "SEEDED_TOKEN", "value": f"{SEEDED_SECRET_PREFIX}{index:03d}-e41f"}]
    return data


def revisions_by_name(state: Any, names: list[str] | tuple[str, ...]) -> dict[str, list[str]]:
    """Revision ids of each named deployment, oldest first."""
    return {name: [revision["id"] for revision in state.find_deployment(name)["revisions"]] for name in names}


def total_revisions(state: Any) -> int:
    """Revisions across every deployment the emulator holds."""
    return sum(len(deployment["revisions"]) for deployment in state.snapshot()["deployments"])


# ---------------------------------------------------------------------------------------------- TLS
@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway CA and a server certificate for 127.0.0.1 / localhost signed by it."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """Generate a CA and a server certificate (EC P-256, valid for a day) with ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Reliability Test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.server_key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files


@contextmanager
def tls_emulator(state: Any, tls: TlsFiles) -> Iterator[str]:
    """Serve ``state`` over HTTPS on 127.0.0.1 (EmulatorServer speaks plain HTTP only); yield the base URL."""
    import uvicorn

    from airflow_provider.emulator.server import QuickServer, bind_socket
    from airflow_provider.emulator.web.app import create_app

    sock = bind_socket("127.0.0.1", 0)
    config = uvicorn.Config(
        create_app(state),
        loop="asyncio",
        http="h11",
        ws="none",
        lifespan="off",
        log_level="critical",  # the refused handshakes are the point of the test, not news
        access_log=False,
        ssl_certfile=str(tls.server_cert),
        ssl_keyfile=str(tls.server_key),
    )
    server = QuickServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the TLS emulator did not start")
        time.sleep(0.005)
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


# -------------------------------------------------------------------------------------- stub server
@dataclass
class StubResponse:
    """What the stub answers: status, headers and a body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class StubServer:
    """A plain HTTP server on 127.0.0.1 answering every request with ``respond(method, path)`` and
    recording each request's method, path and headers, and counting the connections it accepted.

    :param respond: builds the answer of one request.
    :param keep_alive: speak HTTP/1.1 and keep each connection open for further requests (else HTTP/1.0:
        one request per connection).
    """

    def __init__(self, respond: Callable[[str, str], StubResponse], *, keep_alive: bool = False) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.connections = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                stub.connections += 1

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                stub.requests.append((self.command, self.path, dict(self.headers)))
                answer = respond(self.command, self.path)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_GET = do_PATCH = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# ------------------------------------------------------------------------------------------ scanners
@dataclass
class Hit:
    """One place a needle was found."""

    where: str
    needle: str


@dataclass
class ScanResult:
    """What a scan looked at and what it found."""

    places: int = 0
    """Tables (or files, or texts) scanned."""
    rows: int = 0
    cells: int = 0
    bytes: int = 0
    hits: list[Hit] = field(default_factory=list)
    per_place: dict[str, int] = field(default_factory=dict)
    """Cells (database) or bytes (files) scanned per table or file."""


def _variants(value: Any) -> list[bytes]:
    """The bytes to search in one stored value: raw, and inflated when it is zlib-compressed."""
    if value is None:
        return []
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, bytes):
        found = [value]
        with suppress(zlib.error):
            found.append(zlib.decompress(value))
        return found
    if isinstance(value, (dict, list)):
        return [json.dumps(value, default=str).encode()]
    return [str(value).encode("utf-8", "replace")]


def _needle_hits(where: str, blobs: list[bytes], needles: dict[str, str]) -> list[Hit]:
    return [Hit(where, name) for name, needle in needles.items() if any(needle.encode() in blob for blob in blobs)]


def scan_database(needles: dict[str, str]) -> ScanResult:
    """Search every column of every table of Airflow's metadata database for each needle.

    Values are searched as text; binary values also zlib-inflated; trigger kwargs also decrypted with the
    configured Fernet key (a no-op without one).
    """
    from airflow import settings
    from airflow.models.crypto import get_fernet
    from sqlalchemy import inspect, text

    result = ScanResult()
    engine = settings.engine
    fernet = get_fernet()
    with engine.connect() as connection:
        for table in sorted(inspect(engine).get_table_names()):
            result.places += 1
            cells = 0
            for row in connection.execute(text(f'SELECT * FROM "{table}"')).mappings():
                result.rows += 1
                for column, value in row.items():
                    cells += 1
                    blobs = _variants(value)
                    if table == "trigger" and column == "kwargs" and isinstance(value, str):
                        with suppress(Exception):  # already plain JSON without a Fernet key
                            blobs.append(fernet.decrypt(value.encode()))
                    result.hits += _needle_hits(f"{table}.{column}", blobs, needles)
            result.cells += cells
            result.per_place[table] = cells
    return result


def scan_files(roots: list[Path], needles: dict[str, str]) -> ScanResult:
    """Search the raw bytes of every file under ``roots`` (database files, WAL, logs, config...)."""
    result = ScanResult()
    seen: set[Path] = set()
    for root in roots:
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            resolved = path.resolve()
            if not path.is_file() or resolved in seen:
                continue
            seen.add(resolved)
            data = path.read_bytes()
            result.places += 1
            result.bytes += len(data)
            result.per_place[str(path)] = len(data)
            result.hits += _needle_hits(str(path), [data], needles)
    return result


def scan_texts(texts: dict[str, str], needles: dict[str, str]) -> ScanResult:
    """Search named texts (captured output, exception messages)."""
    result = ScanResult()
    for name, content in texts.items():
        result.places += 1
        result.bytes += len(content)
        result.hits += _needle_hits(name, [content.encode("utf-8", "replace")], needles)
    return result
