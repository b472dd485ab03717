"""shrink_group: the survivors of a lost rank go on in a group without it (docs/pytorch.md, "Shrinking
after a lost rank").

The shape is upstream torch's `torch.distributed.distributed_c10d.shrink_group` (torch 2.10, over
ncclCommShrink), which torch 1.13 lacks: the same arguments and flags, the same rule that shrinking the
default group makes the result the new default. The backend half is ProcessGroupFsdp.shrink
(Communicator::shrink: local, no message, never waits on the dead); this half registers the new group
with torch.distributed so its collectives accept it."""
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ._C import ProcessGroupFsdp

SHRINK_DEFAULT = 0  # the parent group stays as it is (a live excluded rank may still use it)
SHRINK_ABORT = 1    # the parent's operations in flight fail at once and the parent stays broken

# Shrinks so far per parent group name: the k-th shrink of group "0" is "0/shrink<k>" on every survivor
# (each shrinks a group the same number of times, Communicator::shrink's contract), so the names and the
# store prefix below agree across the survivors without a message.
_shrinks = {}


def _check_ranks(ranks_to_exclude, size):
    if not isinstance(ranks_to_exclude, (list, tuple)):
        raise TypeError(f"shrink_group: ranks_to_exclude must be a list of ranks, not {type(ranks_to_exclude).__name__}")
    for i, r in enumerate(ranks_to_exclude):
        if isinstance(r, bool) or not isinstance(r, int):
            raise TypeError(f"shrink_group: ranks_to_exclude entry {i} ({r!r}) is not an int")
    if not ranks_to_exclude:
        raise ValueError(f"shrink_group: ranks_to_exclude is empty (the group of {size} would not change)")
    return list(ranks_to_exclude)


def shrink_group(ranks_to_exclude, group=None, shrink_flags=SHRINK_DEFAULT):
    """The group of `group`'s ranks not in `ranks_to_exclude` (ranks of `group`), renumbered in order.

    Every survivor calls it with the same list; the excluded ranks do not call it. Nothing is sent and
    nobody is waited on, so it returns at once even when the excluded ranks are dead or frozen.
    SHRINK_ABORT first fails what `group` still has in flight (its operations on other threads raise)
    and leaves it broken. Shrinking the default group (group None) makes the result the default group
    (dist.get_rank() and get_world_size() are the new ones) and drops every other group, whose ranks
    no longer mean the same; otherwise the result is a subgroup of the default group.

    Raises TypeError for a group of another backend or a non-int entry, ValueError naming the entry for
    one out of range, listed twice, this rank, or a list of every rank (or for a group torch no longer
    knows), before anything changed."""
    parent = c10d._get_default_group() if group is None else group
    if not isinstance(parent, ProcessGroupFsdp):
        raise TypeError(f"shrink_group: the group is a {type(parent).__name__}; only backend \"fsdp\" groups shrink")
    if shrink_flags not in (SHRINK_DEFAULT, SHRINK_ABORT):
        raise ValueError(f"shrink_group: shrink_flags {shrink_flags!r} is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)")
    if parent not in c10d._pg_map:
        raise ValueError("shrink_group: the group is not one of torch.distributed's (destroyed, or dropped when the "
                         "default group shrank)")
    excluded = _check_ranks(ranks_to_exclude, parent.size())
    child = parent.shrink(excluded, abort=shrink_flags == SHRINK_ABORT)  # ValueError for a bad entry

    survivors = [r for r in range(parent.size()) if r not in set(excluded)]
    backend, store = c10d._pg_map[parent]
    parent_name = c10d._pg_names[parent]
    _shrinks[parent_name] = _shrinks.get(parent_name, 0) + 1
    name = f"{parent_name}/shrink{_shrinks[parent_name]}"
    # A fresh namespace in the store: the groups torch makes later (new_group's barrier keys) never
    # meet keys an excluded rank wrote.
    store = dist.PrefixStore(name + "/", store)
    if parent is c10d.GroupMember.WORLD:
        for pg in list(c10d._pg_map):
            del c10d._pg_map[pg], c10d._pg_names[pg], c10d._pg_group_ranks[pg]
        c10d._update_default_pg(child)
        global_ranks = list(range(child.size()))
    else:
        group_to_global = {g: r for r, g in c10d._pg_group_ranks[parent].items()}
        global_ranks = [group_to_global[r] for r in survivors]
    c10d._pg_map[child] = (backend, store)
    c10d._pg_names[child] = name
    c10d._pg_group_ranks[child] = {g: r for r, g in enumerate(global_ranks)}
    return child
