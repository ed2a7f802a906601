"""The nodes as the decisions read them: a NodeView per node (its capacity, what its leases hold,
its victims' ladder) and the pool's columns, rebuilt only for the nodes whose books changed.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence

from .backfill_plan import _fitting
from .books import ROLES, NodeState, shared_size
from .policy import Reject
from .records import (HOLDS_ALL, HOLDS_MEMORY, NO_RESERVE, ZERO, BackfillConfig, Lease, Size,
                      VmRole, replace)
from .reserves import on_demand_share
from .snapshot import NodeArrays, NodeView, Pool, VictimLadder, VmView


class _VmsByNode(Mapping):
    """The pool's VMs per node, as the policies read them, without copying them per decision."""

    def __init__(self, views: dict[str, list[VmView]]) -> None:
        self._views = views

    def __getitem__(self, node_id: str) -> Sequence[VmView]:
        return self._views[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)


class _NodeVms:
    """A node's VMs as the policies see them (VmViews of the leases that hold room, in the books'
    order) and their sums, kept as leases are booked: a rebuild of the node's view reads these
    rather than walking every lease of the node (policy.summed's figures, exactly)."""
    __slots__ = ("views", "vcpus", "memory", "pinned_vcpus", "pinned_memory", "backfill_vcpus", "backfill_vms",
                 "on_demand_memory", "victims_changed", "transit_vcpus", "transit_memory")

    def __init__(self) -> None:
        self.views: dict[str, VmView] = {}   # lease id -> its view
        self.vcpus = self.memory = self.pinned_vcpus = self.pinned_memory = 0
        self.backfill_vcpus = self.backfill_vms = self.on_demand_memory = 0
        self.transit_vcpus = self.transit_memory = 0   # backfill VMs starting or stopping
        self.victims_changed = True   # the victims' ladder must be read afresh from the views

    def add(self, vm: VmView) -> None:
        self.views[vm.vm_id] = vm
        self._count(vm, 1)

    def remove(self, lease_id: str) -> None:
        vm = self.views.pop(lease_id, None)
        if vm is not None:
            self._count(vm, -1)

    def _count(self, vm: VmView, sign: int) -> None:
        vcpus, memory = vm.size.vcpus * sign, vm.size.memory_mib * sign
        self.vcpus += vcpus
        self.memory += memory
        if vm.role is VmRole.BACKFILL:
            self.backfill_vcpus += vcpus
            self.backfill_vms += sign
            if vm.preemptible:   # a victim: it counts in the ladder, not in what is pinned
                self.victims_changed = True
                return
            self.transit_vcpus += vcpus
            self.transit_memory += memory
        else:
            self.on_demand_memory += memory
        self.pinned_vcpus += vcpus
        self.pinned_memory += memory

    def summed(self, bare: NodeView, unexplained: Size, last: NodeView | None, by_busy: bool = False) -> NodeView:
        """policy.summed(bare, the views, unexplained), from the kept sums; the victims' figures
        are those of `last` (the node's previous view) unless its victims changed since."""
        if self.victims_changed or last is None:
            victims = [vm for vm in self.views.values() if vm.role is VmRole.BACKFILL and vm.preemptible]
            times = [vm.launched_at for vm in victims]
            newest, oldest = (max(times), min(times)) if times else (None, None)
            ladder = VictimLadder.of(victims, by_busy)   # idle_first's ladders are by its clock
            self.victims_changed = False
        else:
            newest, oldest, ladder = last.newest_victim_at, last.oldest_victim_at, last.victim_ladder
        allocated, pinned = Size(self.vcpus, self.memory), Size(self.pinned_vcpus, self.pinned_memory)
        if unexplained is not ZERO and unexplained != ZERO:   # room taken outside any lease (rare)
            allocated, pinned = unexplained + allocated, unexplained + pinned
        return replace(bare, allocated=allocated, pinned=pinned, in_transit=Size(self.transit_vcpus, self.transit_memory),
                       newest_victim_at=newest, backfill_vcpus=self.backfill_vcpus, backfill_vms=self.backfill_vms,
                       on_demand_memory_mib=self.on_demand_memory, oldest_victim_at=oldest, victim_ladder=ladder)


class Views:
    """Stage: the NodeViews and the pool's columns. Owns the views and their caches; told by the
    kernel which nodes changed (_views_stale) and which leases to view (_view_lease, _unview_lease)."""

    def _init_views(self, backfill: BackfillConfig) -> None:
        self._node_views: dict[str, NodeView] = {}
        self._vm_views: dict[str, list[VmView]] = {}
        self._vms_on: dict[str, _NodeVms] = {}   # node -> its leases' views and their sums, kept by _book
        self._bare_views: dict[str, tuple[tuple, NodeView]] = {}          # node -> (its key, view without sums)
        self._dirty: set[str] = set()            # nodes whose view must be rebuilt
        # nodes where only idle_first's clocks moved since their last rebuild (_view_clock): their
        # ladders are read again, their sums and what else reads views are not
        self._clocks_moved: set[str] = set()
        self._rebuilt: set[str] = set()          # nodes whose view was rebuilt since the last selection
        self._columns = NodeArrays([])           # the views as columns, row by row
        self._view_rows: list[NodeView] = []     # the views in the columns' rows (self._node_views' order)
        self._lent: list[weakref.ref] = []       # snapshots' twins of the columns (NodeArrays.lend)
        self._backfill_roomy: set[str] = set()   # nodes where a backfill VM of the size below fits
        self._backfill_roomy_size = backfill.size
        self._unable_cache: dict[tuple[str, int], frozenset[str]] = {}
        self._od_share: dict[str, float] = {}   # up node -> its on-demand share (the demand's running sum)
        self._od_total = 0.0

    def _views_stale(self, node_id: str) -> None:
        """The node's books changed: its view is rebuilt at the next refresh."""
        self._dirty.add(node_id)

    def _unview_lease(self, node_id: str, lease_id: str) -> None:
        vms = self._vms_on.get(node_id)
        if vms is not None:
            vms.remove(lease_id)

    def _images_changed(self) -> None:
        """A node came, or its images or smallest guest changed: which nodes can boot what is read afresh."""
        self._unable_cache.clear()

    def _take_rebuilt(self) -> set[str]:
        """The nodes whose view was rebuilt since the last call."""
        rebuilt, self._rebuilt = self._rebuilt, set()
        return rebuilt

    def _view_lease(self, lease: Lease) -> None:
        """Count a lease just booked in its node's VMs (none if it holds nothing now)."""
        vms = self._vms_on.get(lease.node_id)
        if vms is None:
            vms = self._vms_on[lease.node_id] = _NodeVms()
        state = lease.state   # what it holds (Lease.held), without a Size unless it holds some
        if state in HOLDS_ALL:
            vcpus, memory = lease.vcpus, lease.memory_mib
        elif state in HOLDS_MEMORY:
            vcpus, memory = 0, lease.memory_mib
        else:
            return
        if vcpus == 0 and memory == 0:
            return
        # VmView(...) without the frozen dataclass's __init__ (a field at a time): one per booking
        vm = object.__new__(VmView)
        vm.__dict__.update(vm_id=lease.lease_id, node_id=lease.node_id, role=ROLES[lease.role],
                           size=shared_size(vcpus, memory),
                           # a resumed VM's work began later by its time asleep (the policies weigh work)
                           launched_at=(lease.launched_at or lease.created_at) + lease.slept_seconds,
                           preemptible=lease.role == "backfill" and state == "running")
        if lease.role == "on_demand":
            vm.__dict__["placed"] = (lease.created_at, lease.request_id)
        if self._tracks_cpu and lease.role == "backfill":
            vm.__dict__["busy_since"] = self._busy_since.get(lease.lease_id)
        vms.add(vm)

    def _view_again(self, lease: Lease, touch: bool = True) -> None:
        """View a lease afresh (idle_first's clock changed). `touch`: the books changed too; a
        clock alone changes no lease nor what preemption can free, so only the node's view is
        rebuilt (no re-matching of its next report, no retry of waiting requests)."""
        vms = self._vms_on.get(lease.node_id)
        if vms is not None and lease.lease_id in vms.views:
            vms.remove(lease.lease_id)
            self._view_lease(lease)
            if touch:
                self._touch(lease.node_id)
            else:
                self._dirty.add(lease.node_id)

    # The light rebuild of a node whose only change is idle_first's clocks (False: the full one, as
    # before; tests/unit/test_sim_outputs_speed.py runs both and finds the same decisions)
    clock_rebuilds_light = True

    def _view_clock(self, lease: Lease) -> None:
        """idle_first's clock of a running backfill lease changed (nothing else did): its VmView
        again with the new clock, last in its node's order as _view_again puts it, and the node's
        ladder read again at the next refresh. The node's sums and everything else in its view stay
        as they are, so volunteer selection and the backfill plan (which read no clock) do not read
        it again."""
        if not self.clock_rebuilds_light:
            self._view_again(lease, touch=False)
            return
        vms = self._vms_on.get(lease.node_id)
        old = vms.views.pop(lease.lease_id, None) if vms is not None else None
        if old is None:
            return
        # the view _view_lease would make of the same running lease, with the new clock
        vm = object.__new__(VmView)
        vm.__dict__.update(old.__dict__)
        vm.__dict__["busy_since"] = self._busy_since.get(lease.lease_id)
        vms.views[lease.lease_id] = vm
        if vm.role is VmRole.BACKFILL and vm.preemptible:
            vms.victims_changed = True
        self._clocks_moved.add(lease.node_id)

    def _refresh_clocks(self) -> None:
        """Rebuild the views of the nodes where only clocks moved (_view_clock): the node's VMs and
        ladder, and the ladder's part of its row of the columns, as the full rebuild would make
        them (its sums, and the launch times of its newest and oldest victims, are those of its
        view). A node also changed otherwise, or whose view's key, room outside its leases or sums
        moved, gets the full rebuild."""
        moved, self._clocks_moved = self._clocks_moved, set()
        dirty, columns = self._dirty, self._columns
        for node_id in sorted(moved - dirty):
            node, view = self.nodes.get(node_id), self._node_views.get(node_id)
            books, bare = self._vms_on.get(node_id), self._bare_views.get(node_id)
            row = columns.position.get(node_id)
            if node is None or view is None or books is None or bare is None or row is None or \
                    node.unexplained != ZERO or view.allocated.vcpus != books.vcpus or \
                    view.allocated.memory_mib != books.memory or bare[0] != self._view_key(node_id, node):
                dirty.add(node_id)
                continue
            views = self._vm_views[node_id] = list(books.views.values())
            if books.victims_changed:
                books.victims_changed = False
                victims = [vm for vm in views if vm.role is VmRole.BACKFILL and vm.preemptible]
                view = self._node_views[node_id] = replace(
                    view, victim_ladder=VictimLadder.of(victims, self._tracks_cpu))
                if self._lent:
                    self._own_columns()
                    columns = self._columns
                columns.set_ladder(row, view)
            self._view_rows[row] = view

    def _view_key(self, node_id: str, node: NodeState) -> tuple:
        """What a node's view holds besides its VMs' sums (its bare view is kept while it is the same)."""
        reserve = self.reserves.get(node_id) or self.reserves.get("*") or NO_RESERVE   # reserve_for's
        return (node.capacity, node.state == "up", reserve.vcpus, reserve.memory_mib,
                reserve.whole_node or node_id in self.reserved_nodes)

    def _refresh_views(self) -> None:
        if self._clocks_moved:
            self._refresh_clocks()
        if not self._dirty:
            return   # nothing changed since the last refresh (often: a decision right after another)
        regroup = False   # a node came or went: the columns are built afresh, in the views' order
        for node_id in sorted(self._dirty):   # the views' order, the pool's, is the same in every process
            node = self.nodes.get(node_id)
            self._view_rebuilt(node_id)   # its view changes: the plan reads it again
            if node is None:
                regroup = regroup or node_id in self._node_views
                self._node_views.pop(node_id, None)
                self._vm_views.pop(node_id, None)
                self._bare_views.pop(node_id, None)
                self._backfill_roomy.discard(node_id)
                self._od_total -= self._od_share.pop(node_id, 0.0)
                continue
            books = self._vms_on.get(node_id) or _NodeVms()
            self._vm_views[node_id] = list(books.views.values())
            # The node's view less its sums: kept while what it holds is the same (most rebuilds
            # are for a change of VMs alone)
            key = self._view_key(node_id, node)
            bare = self._bare_views.get(node_id)
            if bare is None or bare[0] != key:
                bare = self._bare_views[node_id] = (key, NodeView(node_id, key[0], key[1], Size(key[2], key[3]),
                                                                  key[4]))
            view = self._node_views[node_id] = books.summed(bare[1], node.unexplained, self._node_views.get(node_id),
                                                            self._tracks_cpu)
            self._note_backfill_room(view)
            share = on_demand_share(view) if view.up else 0.0   # the demand history's sample, kept summed
            self._od_total += share - self._od_share.get(node_id, 0.0)
            self._od_share[node_id] = share
            row = self._columns.position.get(node_id)
            if row is None:
                regroup = True
            elif not regroup:
                if self._lent:
                    self._own_columns()
                self._columns.set_row(row, view)
                self._view_rows[row] = view
        if regroup:
            self._view_rows = list(self._node_views.values())
            self._columns = NodeArrays(self._view_rows)
            self._lent = []
        self._rebuilt |= self._dirty
        self._dirty.clear()

    def _note_backfill_room(self, view: NodeView) -> None:
        """Keep the set of nodes with room for a backfill VM of the size it was kept for
        (fitting_count(backfill_room(view), size), in plain ints)."""
        size = self._backfill_roomy_size
        if view.up and not view.backfill_excluded:
            capacity, reserve, allocated = view.capacity, view.reserve, view.allocated
            fits = _fitting(capacity.vcpus - reserve.vcpus - allocated.vcpus,
                            capacity.memory_mib - reserve.memory_mib - allocated.memory_mib,
                            size.vcpus, size.memory_mib)
        else:
            fits = 0
        if fits:
            self._backfill_roomy.add(view.node_id)
        else:
            self._backfill_roomy.discard(view.node_id)

    def _nodes_with_backfill_room(self, size: Size) -> set[str]:
        """The nodes where at least one backfill VM of `size` fits (views up to date)."""
        if size != self._backfill_roomy_size:
            self._backfill_roomy_size = size
            self._backfill_roomy.clear()
            for view in self._node_views.values():
                self._note_backfill_room(view)
        return self._backfill_roomy

    def _own_columns(self) -> None:
        """Before a row of the columns changes: copy them if a snapshot that reads them is still alive."""
        if any(lent() is not None for lent in self._lent):
            self._columns = self._columns.copy()
        self._lent = []

    def snapshot(self, now: float) -> Pool:
        self._refresh_views()
        columns = self._columns.lend()   # no copy: _own_columns copies them if they change under it
        if len(self._lent) >= 64:   # many snapshots and no change between them: keep the live ones only
            self._lent = [lent for lent in self._lent if lent() is not None]
        self._lent.append(weakref.ref(columns))
        return Pool(tuple(self._view_rows), _VmsByNode(self._vm_views), now, columns)

    def _passing_pool(self, now: float) -> Pool:
        """The pool for a pure function that reads it at once and keeps nothing of it (the backfill
        plan), before anything is booked: the live rows and columns, neither copied nor lent (a
        snapshot's tuple of every node's view and twin columns, at every fill, cost more than the plan)."""
        self._refresh_views()
        return Pool(self._view_rows, _VmsByNode(self._vm_views), now, self._columns)   # type: ignore[arg-type]

    def view(self, node_id: str) -> NodeView:
        self._refresh_views()
        return self._node_views[node_id]

    def _unable(self, memory_mib: int, image: str) -> frozenset[str]:
        """The nodes that cannot boot this VM (image missing, memory below their least); kept
        until a node's catalogue changes, since a pool's nodes mostly offer the same images."""
        key = (image, memory_mib)
        unable = self._unable_cache.get(key)
        if unable is None:
            unable = frozenset(n.node_id for n in self.nodes.values()
                               if image not in n.images or memory_mib < n.min_memory_mib)
            if len(self._unable_cache) > 256:
                self._unable_cache.clear()
            self._unable_cache[key] = unable
        return unable

    def able(self, pool: Pool, memory_mib: int, image: str) -> Pool:
        """The pool less the nodes that cannot boot this VM."""
        unable = self._unable(memory_mib, image)
        if not unable:
            return pool
        return Pool(tuple(n for n in pool.nodes if n.node_id not in unable), pool.vms_by_node, pool.now)

    def unbootable(self, pool: Pool, memory_mib: int, image: str) -> Reject | None:
        """A rejection when no up node could boot this VM at all: checked before anything is stopped."""
        unable = self._unable(memory_mib, image)
        if not unable or any(n.up and n.node_id not in unable for n in pool.nodes):
            return None
        up = [self.nodes[n.node_id] for n in pool.nodes if n.up]
        if not up:
            return None
        if not any(image in n.images for n in up):
            offered = sorted(set().union(*(n.images for n in up)))
            return Reject(f"no up node has image {image!r} (they offer: {', '.join(offered[:10]) or 'none'})",
                          "no_image")
        least = min(n.min_memory_mib for n in up if image in n.images)
        return Reject(f"{memory_mib} MiB is less than the smallest VM the agents with image {image!r} "
                      f"launch ({least} MiB)", "below_image_minimum")

    def _fits_beside(self, node_id: str, want: Size) -> bool:
        """Whether the node's memory, less the headroom, holds the new VM beside everything it runs now."""
        view = self.view(node_id)
        return view.allocated.memory_mib + want.memory_mib <= view.capacity.memory_mib - self.settings.headroom_mib
