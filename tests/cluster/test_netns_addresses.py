"""The namespace lab's addressing: 240 hosts per /24, a large run spanning consecutive /24s."""

from __future__ import annotations

import pytest

from tests.cluster import netns


def test_hosts_fill_one_subnet_then_the_next() -> None:
    assert netns.host_address(7, 0) == "10.213.7.11"
    assert netns.host_address(7, netns.HOSTS_PER_SUBNET - 1) == "10.213.7.250"
    assert netns.host_address(7, netns.HOSTS_PER_SUBNET) == "10.213.8.11"
    assert netns.host_address(7, netns.MAX_HOSTS - 1) == "10.213.8.250"
    with pytest.raises(ValueError, match=r"outside 0\.\.479"):
        netns.host_address(7, netns.MAX_HOSTS)


@pytest.mark.parametrize(("hosts", "subnets"), [(1, 1), (240, 1), (241, 2), (256, 2), (480, 2)])
def test_a_run_spans_as_many_subnets_as_its_hosts_need(hosts: int, subnets: int) -> None:
    assert netns.subnets_for(hosts) == subnets


def test_a_wide_run_gets_consecutive_free_subnets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "used_subnet_indexes", lambda: {0, 2})
    assert netns.pick_subnet_index(set(), 1) == 1
    assert netns.pick_subnet_index(set(), 2) == 3  # 1 is free but 2 is not
    assert netns.pick_subnet_index({4}, 2) == 5
    monkeypatch.setattr(netns, "used_subnet_indexes", lambda: set(range(1, 256, 2)))
    with pytest.raises(RuntimeError, match="test subnets are in use"):
        netns.pick_subnet_index(set(), 2)


@pytest.mark.root
def test_up_beyond_the_cap_says_why_and_creates_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cluster.__main__ import main

    before = netns.used_subnet_indexes()
    assert main(["up", str(netns.MAX_HOSTS + 1)]) == 2
    assert f"1..{netns.MAX_HOSTS} hosts, not {netns.MAX_HOSTS + 1}" in capsys.readouterr().err
    assert netns.used_subnet_indexes() == before
