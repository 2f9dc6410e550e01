"""One HTTP/1.1 POST on the event loop: request out, status, headers and a capped body in.

A planner's endpoint may be slow, stuck, or hostile (headers, then one byte a second).
The exchange therefore runs on the supervisor's own event loop over
``asyncio.open_connection`` (TLS through an ``ssl`` context for https), never in a worker
thread: the caller puts ONE deadline (``asyncio.wait_for``) around the whole of ``post``
(connect, TLS handshake, request, status line, headers, body); when it passes, the
exchange is cancelled and its connection aborted, so nothing of it outlives the deadline.
A blocking client in a thread could not promise that: its socket timeout is per read, so
a trickling body keeps the thread (and a slot of the loop's default executor, which the
supervisor's restarts also need) for as long as the bytes keep coming.

What it speaks: one request per connection (``Connection: close``), no compression
(``Accept-Encoding: identity``), a body by ``Content-Length``, by chunked transfer
coding, or up to the end of the connection; interim 1xx responses are skipped. Whatever
does not fit (a status line that is not HTTP, headers over ``MAX_HEAD_BYTES``, a body
over the caller's cap, a connection closed mid-body) raises ``HttpError`` with the reason.
One caveat: a host *name* is resolved by the loop's resolver (``getaddrinfo`` in the
default executor, bounded by the system resolver's own timeouts); an IP address needs no
resolution. Torch-free.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response; ordinary ones are < 2 KiB
MAX_LINE_BYTES = 8 * 1024  # one header or chunk-size line
MAX_INTERIM = 8  # 1xx responses skipped before the final one


class HttpError(Exception):
    """The exchange failed for the reason given (the connection is closed)."""


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes


async def post(url: str, body: bytes, headers: dict[str, str], max_body: int) -> HttpReply:
    """POST ``body`` to ``url`` (http or https); the status and at most ``max_body`` bytes
    of the body. No deadline of its own: the caller's (``asyncio.wait_for``) bounds all of
    it, and cancelling it aborts the connection."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"not an http(s) URL: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as err:
        raise HttpError(f"bad port in {url!r}") from err
    request = _request_head(parts, len(body), headers) + body
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=tls, limit=MAX_LINE_BYTES)
    except OSError as err:  # refused, unreachable, name unknown, TLS handshake refused
        raise HttpError(f"cannot connect to {parts.hostname}:{port}: {err}") from err
    try:
        writer.write(request)
        await writer.drain()
        status, response_headers = await _response_head(reader)
        return HttpReply(status, await _body(reader, status, response_headers, max_body))
    except asyncio.IncompleteReadError as err:
        raise HttpError("connection closed before the reply was complete") from err
    except OSError as err:  # ssl.SSLError included
        raise HttpError(f"connection failed mid-exchange: {type(err).__name__}: {err}") from err
    finally:
        writer.transport.abort()  # at once, on success, failure or cancellation: nothing lingers


def _request_head(parts: SplitResult, length: int, headers: dict[str, str]) -> bytes:
    """The request line and headers, one request per connection, no compression."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    fields = {
        "Host": parts.netloc.rpartition("@")[2],  # never the userinfo
        "Content-Length": str(length),
        "Connection": "close",
        "Accept-Encoding": "identity",
        **headers,
    }
    if any(c in f"{k}{v}" for k, v in fields.items() for c in "\r\n"):
        raise HttpError("a request header holds a line break")  # not echoed: it may be the key
    head = f"POST {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    try:
        return head.encode("latin-1")
    except UnicodeEncodeError:
        raise HttpError("a request header is not latin-1 text") from None


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One CRLF (or LF) line without its ending; over MAX_LINE_BYTES is an HttpError."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError as err:
        raise HttpError(f"a response line over {MAX_LINE_BYTES} bytes") from err
    return line.rstrip(b"\r\n")


async def _response_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The final response's status and headers (names lower-cased; repeats joined by ", ")."""
    for _ in range(MAX_INTERIM + 1):
        status_line = await _line(reader)
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise HttpError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        size = len(status_line)
        while line := await _line(reader):
            size += len(line)
            if size > MAX_HEAD_BYTES:
                raise HttpError(f"response headers over {MAX_HEAD_BYTES} bytes")
            name, colon, value = line.decode("latin-1").partition(":")
            if not colon:
                raise HttpError(f"not a header line: {line[:80]!r}")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        status = int(code)
        if not 100 <= status < 200:
            return status, headers
    raise HttpError(f"more than {MAX_INTERIM} interim (1xx) responses")


async def _body(reader: asyncio.StreamReader, status: int, headers: dict[str, str], cap: int) -> bytes:
    if status in (204, 304):
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _chunked(reader, cap)
    length = headers.get("content-length")
    if length is not None:
        values = {v.strip() for v in length.split(",")}
        if len(values) != 1 or not (only := values.pop()).isdigit():
            raise HttpError(f"bad Content-Length: {length[:80]!r}")
        if int(only) > cap:
            raise HttpError(f"reply body of {int(only)} bytes is over the {cap}-byte cap")
        return await reader.readexactly(int(only))
    data = await reader.read(cap + 1)  # no length: the body ends with the connection
    while len(data) <= cap and (more := await reader.read(cap + 1 - len(data))):
        data += more
    if len(data) > cap:
        raise HttpError(f"reply body over the {cap}-byte cap")
    return data


async def _chunked(reader: asyncio.StreamReader, cap: int) -> bytes:
    """A chunked body: size lines in hex (extensions ignored), data, then trailers to an empty line."""
    data = bytearray()
    while True:
        size_text = (await _line(reader)).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HttpError(f"bad chunk size: {size_text[:40]!r}") from None
        if size == 0:
            while await _line(reader):  # trailers, ignored
                pass
            return bytes(data)
        if len(data) + size > cap:
            raise HttpError(f"reply body over the {cap}-byte cap")
        data += await reader.readexactly(size)
        await _line(reader)  # the CRLF after the chunk's data
