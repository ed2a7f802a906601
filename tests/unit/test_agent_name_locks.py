"""Per-name locks (issue 23): a name's lock lives only while someone holds it or waits for it,
so the map does not grow with every name ever launched; and two callers for one name still take
turns, whatever the interleaving."""
from __future__ import annotations

import threading
import time

from nodeagent.domains import NameLocks


def test_the_map_is_empty_after_many_names_come_and_go():
    locks = NameLocks()
    for i in range(5000):
        with locks.hold(f"vm-{i}") as held:
            assert held and len(locks) == 1
    assert len(locks) == 0
    with locks.hold("busy"):
        with locks.hold("busy", blocking=False) as held:   # the reaper's way: skip a busy name
            assert not held
        assert len(locks) == 1
    assert len(locks) == 0


def test_calls_for_one_name_are_serialized_while_the_map_is_pruned():
    """Many threads, few names: at most one inside per name at any time, and no lock is left."""
    locks = NameLocks()
    inside: dict[str, int] = {}
    worst: dict[str, int] = {}
    count_guard = threading.Lock()
    errors: list[str] = []

    def worker(seed: int) -> None:
        for i in range(300):
            name = f"vm-{(seed + i) % 3}"
            with locks.hold(name):
                with count_guard:
                    inside[name] = inside.get(name, 0) + 1
                    worst[name] = max(worst.get(name, 0), inside[name])
                if i % 50 == 0:
                    time.sleep(0.001)   # let the others queue up behind it
                with count_guard:
                    inside[name] -= 1
            if len(locks) > 3:
                errors.append(f"{len(locks)} locks for 3 names")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert worst == {"vm-0": 1, "vm-1": 1, "vm-2": 1}
    assert len(locks) == 0


def test_a_waiter_keeps_the_lock_alive_for_the_next_holder():
    """The holder leaving while another waits must not drop the lock the waiter is queued on:
    a third caller arriving then must queue on the same lock, not get a fresh one."""
    locks = NameLocks()
    order: list[str] = []
    first_in, release_first = threading.Event(), threading.Event()
    second_in, release_second = threading.Event(), threading.Event()

    def first() -> None:
        with locks.hold("vm"):
            first_in.set()
            release_first.wait(5)
            order.append("first out")

    def second() -> None:
        with locks.hold("vm"):
            order.append("second in")
            second_in.set()
            release_second.wait(5)
            order.append("second out")

    a = threading.Thread(target=first)
    a.start()
    first_in.wait(5)
    b = threading.Thread(target=second)
    b.start()
    time.sleep(0.05)   # second now waits on the lock
    release_first.set()
    second_in.wait(5)
    with locks.hold("vm", blocking=False) as held:   # a third caller meets the second's lock
        assert not held
    release_second.set()
    a.join(5)
    b.join(5)
    assert order == ["first out", "second in", "second out"]
    assert len(locks) == 0
