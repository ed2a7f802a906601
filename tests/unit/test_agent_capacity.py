"""[capacity] cpu_allocation_ratio: the vCPUs a node offers the controller per host CPU."""
from __future__ import annotations

import pytest

from gleaner_common.config import ConfigError
from nodeagent.config import check_config, parse_config
from nodeagent.reporter import offered_vcpus


def test_the_node_offers_its_cpus_times_the_ratio_rounded_down():
    assert offered_vcpus(2, 1.0) == 2
    assert offered_vcpus(2, 4.0) == 8
    assert offered_vcpus(3, 1.5) == 4
    assert offered_vcpus(16, 1.1) == 17   # 17.6, down; 16 x 1.1's float error does not lose one


@pytest.mark.parametrize("ratio", [0.5, 16.5, float("nan")])
def test_a_ratio_out_of_range_is_refused_naming_the_key(ratio):
    config = parse_config({"capacity": {"cpu_allocation_ratio": ratio}}, "agent.toml")
    with pytest.raises(ConfigError) as err:
        check_config(config, "agent.toml")
    assert "capacity.cpu_allocation_ratio" in str(err.value)


def test_the_ratio_reads_from_its_section():
    assert parse_config({"capacity": {"cpu_allocation_ratio": 4.0}}, "agent.toml").cpu_allocation_ratio == 4.0
