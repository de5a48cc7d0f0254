"""Resource limits of a worker, and the block of unprivileged uids a runner's workers use."""

from __future__ import annotations

import os
import resource

MIN_ADDRESS_SPACE = 4 * 1024**3
UID_FIRST, UID_BLOCK, UID_BLOCKS = 40000, 64, 300
SLOT_DIR = "/run/autograder-uid-slots" if os.path.isdir("/run") else "/tmp/autograder-uid-slots"


def apply_worker_limits(limits: dict) -> None:
    """CPU seconds, address space (never below 4 GiB), file size, open files, no core files."""
    address = max(MIN_ADDRESS_SPACE, int(limits.get("address_space", MIN_ADDRESS_SPACE)))
    cpu = int(limits.get("cpu", 120))
    for which, value in (
        (resource.RLIMIT_AS, address),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, int(limits.get("file_size", 64 * 1024**2))),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else value + 5))


def single_task() -> None:
    """RLIMIT_NPROC = 1 for a process about to become a uid of its own: the kernel then refuses
    every new thread and process (its uid already runs one task). Call before dropping to it."""
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))


def _uids_in_use() -> set[int]:
    used = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            used.update(int(u) for u in line.split()[1:])
                            break
            except OSError:
                continue
    return used


def claim_uid_block() -> tuple[int, int] | None:
    """(first uid, lock fd) of a free block of UID_BLOCK uids: no account, no process, and no
    other grading runner holding it. The lock lasts as long as this process."""
    import fcntl
    import pwd

    try:
        os.makedirs(SLOT_DIR, mode=0o700, exist_ok=True)
    except OSError:
        return None
    used = _uids_in_use()
    for slot in range(UID_BLOCKS):
        first = UID_FIRST + slot * UID_BLOCK
        block = range(first, first + UID_BLOCK)
        if used.intersection(block):
            continue
        fd = os.open(os.path.join(SLOT_DIR, f"{slot}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        accounts = False
        for uid in block:
            try:
                pwd.getpwuid(uid)
                accounts = True
                break
            except KeyError:
                pass
        if accounts:
            os.close(fd)
            continue
        return first, fd
    return None
