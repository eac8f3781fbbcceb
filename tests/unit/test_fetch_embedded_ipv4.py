"""The media fetch's public-address check sees through IPv6 addresses that carry an IPv4 one."""

from __future__ import annotations

import pytest

from models_registry.media import fetch


@pytest.mark.parametrize("address", [
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b:1::7f00:1",  # local-use NAT64 prefix
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "::127.0.0.1",  # IPv4-compatible
    "::a9fe:a9fe",
    "::ffff:192.168.1.1",  # IPv4-mapped
    "::ffff:127.0.0.1",
])
def test_an_ipv6_address_carrying_an_inside_ipv4_one_is_not_public(address: str) -> None:
    assert fetch.is_public(address) is False


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8", "2606:4700::1111"])
def test_one_carrying_a_public_ipv4_address_stays_public(address: str) -> None:
    assert fetch.is_public(address) is True
