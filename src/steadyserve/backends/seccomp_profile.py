"""The default seccomp filter of an isolated replica, as container runtimes have one.

A replica in its own namespaces could still try to leave them: ``setns(2)`` into
the controller's network namespace, ``unshare(2)`` or ``clone(2)`` a new user
namespace to gain capabilities there, ``mount(2)`` over what it was given,
``ptrace(2)`` a neighbour, load a kernel module or a BPF program. Docker's and
containerd's default profiles refuse exactly these; so does this one, with
``EPERM`` (a program sees an ordinary "operation not permitted" and can go on),
while every other system call an HTTP or model server makes is allowed.

``clone3(2)`` answers ``ENOSYS``: its flags are in memory a filter cannot read,
so, as in Docker's profile, C libraries fall back to ``clone(2)``, whose flags
the filter does read (a new namespace is refused, a thread or a fork is not).
System calls of another ABI than the machine's own (x32, i386 on x86_64) kill
the process: libseccomp's default for a filter of one architecture.

libseccomp (through ``pyseccomp``, its ctypes binding) compiles the program;
bubblewrap loads it just before it runs the replica (``--seccomp FD``), after
``no_new_privs``.
"""

from __future__ import annotations

import errno
import os
import tempfile
from functools import lru_cache

DENIED = (
    # leaving or making namespaces
    "setns",
    "unshare",
    # the file system view
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    # other processes' memory
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    # the kernel itself
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "iopl",
    "ioperm",
    "quotactl",
    "lookup_dcookie",
    "uselib",
    "vhangup",
    # the machine's clock
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
)
"""Refused with EPERM. Names the running libseccomp does not know (a system call
newer than it) are skipped: the kernel of such a machine predates them too."""

CLONE_NAMESPACES = (
    0x00020000  # CLONE_NEWNS
    | 0x00000080  # CLONE_NEWTIME
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
TIOCSTI = 0x5412
"""Pushing characters into a terminal's input: a classic sandbox escape into the
shell that owns the terminal (replicas have none; refused all the same)."""


class SeccompUnavailable(RuntimeError):
    """libseccomp or its binding is missing; one line."""


@lru_cache(maxsize=1)
def program() -> bytes:
    """The compiled BPF program (``struct sock_filter`` records), built once."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # the binding, or libseccomp.so.2 itself
        raise SeccompUnavailable(f"libseccomp is not usable here ({exc})") from None
    refuse = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        try:
            flt.add_rule(refuse, name)
        except (OSError, ValueError, RuntimeError):
            continue  # unknown to this libseccomp
    # A bit set in CLONE_NAMESPACES, one rule each (libseccomp ORs the rules).
    for bit in range(32):
        flag = 1 << bit
        if CLONE_NAMESPACES & flag:
            flt.add_rule(refuse, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    flt.add_rule(refuse, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    with tempfile.TemporaryFile() as out:
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


def program_fd() -> int:
    """A readable descriptor holding :func:`program` from its start, for bubblewrap's
    ``--seccomp FD`` (inheritable: the caller passes it and closes its copy)."""
    data = program()
    fd = os.memfd_create("steady-seccomp", 0)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
