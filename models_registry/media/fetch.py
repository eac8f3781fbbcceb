"""Fetching a media input named by URL: only from hosts an operator lists, never from a private address.

Off unless HOSTING_MEDIA_FETCH_HOSTS lists hosts. Then every hop (the URL and each
redirect) must name a listed host over http(s); its name is resolved here and every
address checked (no private, loopback, link-local, multicast or reserved one), and the
connection goes to the checked address, so a DNS answer that changes between the check
and the connection (DNS rebinding) cannot reach an inside address. The download has a
timeout and a byte cap. Clients that want URLs fetched can also fetch them themselves
(InferenceClient does).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urljoin, urlsplit

import httpx

from models_registry.core.conf import conf
from models_registry.core.errors import InvalidInput, TooLarge

MAX_REDIRECTS = 3


def is_url(text: str) -> bool:
    """Whether an input names a URL rather than holding the file."""
    return text[:8].lower().startswith(("http://", "https://"))


async def fetch(url: str, where: str) -> tuple[bytes, str | None]:
    """The bytes at url and their Content-Type; InvalidInput when fetching is off or not allowed, TooLarge over the cap."""
    hosts = conf.MEDIA_FETCH_HOSTS
    if not hosts:
        raise InvalidInput(f"{where} is a URL, and this server fetches none: send the file itself "
                           "(the body, base64 or a data URI)")
    try:
        return await asyncio.wait_for(_follow(url, where, hosts), conf.MEDIA_FETCH_TIMEOUT_S)
    except TimeoutError:
        raise InvalidInput(f"{where}: fetching the URL took over {conf.MEDIA_FETCH_TIMEOUT_S:g} s") from None


async def _follow(url: str, where: str, hosts: list[str]) -> tuple[bytes, str | None]:
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or host not in hosts:
            raise InvalidInput(f"{where}: {host or 'the URL'} is not a host this server fetches from "
                               "(HOSTING_MEDIA_FETCH_HOSTS)")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = await checked_address(host, port, where)
        target = parts._replace(netloc=f"[{address}]:{port}" if ":" in address else f"{address}:{port}").geturl()
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
            request = client.build_request("GET", target, headers={"Host": parts.netloc.rsplit("@", 1)[-1]},
                                           extensions={"sni_hostname": host})
            response = await client.send(request, stream=True)
            try:
                if response.is_redirect and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                if response.status_code != 200:
                    raise InvalidInput(f"{where}: the URL answered {response.status_code}")
                return await _read_capped(response, where), response.headers.get("content-type")
            finally:
                await response.aclose()
    raise InvalidInput(f"{where}: more than {MAX_REDIRECTS} redirects")


async def _read_capped(response: httpx.Response, where: str) -> bytes:
    cap = conf.MEDIA_FETCH_MAX_BYTES
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise TooLarge(f"{where}: the URL's file is {declared} bytes; the limit is {cap}")
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise TooLarge(f"{where}: the URL's file is over the limit of {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def checked_address(host: str, port: int, where: str) -> str:
    """One address of host, after checking that every address it resolves to is public."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise InvalidInput(f"{where}: {host} does not resolve") from None
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        if not is_public(address):
            raise InvalidInput(f"{where}: {host} resolves to {address}, a private or reserved address")
    if not addresses:
        raise InvalidInput(f"{where}: {host} does not resolve")
    return addresses[0]


NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the last 32 bits are an IPv4 address a NAT64 reaches
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: local-use NAT64 prefixes
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d, still routed as IPv4 by some stacks


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64, IPv4-compatible), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64 or ip in IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public(address: str) -> bool:
    """Whether an IP address is globally routable (not private, loopback, link-local, multicast, reserved).

    An IPv6 address that carries an IPv4 one (::ffff:a.b.c.d, 2002:aabb:ccdd::, 64:ff9b::a.b.c.d,
    ::a.b.c.d) is judged by that IPv4 address: each can reach it through a translator or tunnel.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL:
            return False
        inner = embedded_ipv4(ip)
        if inner is not None:
            ip = inner  # type: ignore[assignment]
    return ip.is_global and not ip.is_multicast
