"""Classic group states: the table of legal predecessors (Kafka's ClassicGroupState.validPreviousStates)."""

from __future__ import annotations

import itertools

import pytest

from oncelog.coordinator.group.group import ClassicGroup
from oncelog.coordinator.group.state import (
    VALID_PREVIOUS,
    GroupState,
    IllegalGroupTransition,
    check_transition,
)

E, PR, CR, ST, D = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                    GroupState.STABLE, GroupState.DEAD)

# (from, to)
LEGAL = {(E, PR), (PR, E), (PR, CR), (CR, ST), (ST, PR), (CR, PR), (ST, D), (PR, D), (CR, D), (E, D), (D, D)}


@pytest.mark.parametrize("src,dst", list(itertools.product(GroupState, GroupState)))
def test_transition_table(src: GroupState, dst: GroupState) -> None:
    if (src, dst) in LEGAL:
        check_transition("g", src, dst)
    else:
        with pytest.raises(IllegalGroupTransition):
            check_transition("g", src, dst)


def test_table_is_kafkas() -> None:
    assert VALID_PREVIOUS[E] == {PR}
    assert VALID_PREVIOUS[CR] == {PR}
    assert VALID_PREVIOUS[ST] == {CR}
    assert VALID_PREVIOUS[PR] == {ST, CR, E}
    assert VALID_PREVIOUS[D] == set(GroupState)


def test_names_and_lookup() -> None:
    assert [s.display_name for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable",
                                                     "Dead"]
    assert GroupState.from_name("stable") is ST
    assert GroupState.from_name("completingrebalance") is CR
    assert GroupState.from_name("nope") is None


def test_group_transition_records_timestamp() -> None:
    g = ClassicGroup("g")
    g.transition_to(PR, 123)
    assert g.state is PR and g.state_timestamp == 123
    with pytest.raises(IllegalGroupTransition):
        g.transition_to(ST, 124)
    assert g.state is PR
