"""The states of a classic consumer group and which transitions are legal.

``VALID_PREVIOUS`` is Kafka's ``ClassicGroupState.validPreviousStates`` (group-coordinator module):

    Empty                -> PreparingRebalance          (a member joins)
    PreparingRebalance   -> CompletingRebalance         (the join phase ends with members)
                         -> Empty                       (the join phase ends with nobody left)
    CompletingRebalance  -> Stable                      (the leader's assignment is durable and handed out)
    CompletingRebalance, Stable -> PreparingRebalance  (a member joins, leaves, changes or dies)
    any                  -> Dead                        (group deleted, or its offsets expired while Empty)
"""

from __future__ import annotations

from enum import Enum

__all__ = ["VALID_PREVIOUS", "GroupState", "IllegalGroupTransition", "check_transition"]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def display_name(self) -> str:
        """The name DescribeGroups and ListGroups report."""
        return self.value

    @classmethod
    def from_name(cls, name: str) -> GroupState | None:
        """Case-insensitive lookup (ListGroups v4+ states filter)."""
        return _BY_LOWER.get(name.lower())


_BY_LOWER = {s.value.lower(): s for s in GroupState}

E, PR, CR, ST, D = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                    GroupState.STABLE, GroupState.DEAD)

VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    E: frozenset({PR}),
    PR: frozenset({ST, CR, E}),
    CR: frozenset({PR}),
    ST: frozenset({CR}),
    D: frozenset({ST, PR, CR, E, D}),
}


class IllegalGroupTransition(RuntimeError):
    pass


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if current not in VALID_PREVIOUS[target]:
        raise IllegalGroupTransition(
            f"group {group_id} should be in one of {sorted(s.value for s in VALID_PREVIOUS[target])} before moving "
            f"to {target.value}, but is {current.value}")
