#!/usr/bin/env python3
"""Cairn's exec supervisor: runs inside the sandbox and holds every program start of a command's
process tree until it is allowed.

    supervisor.py [--policy FILE] [--rules FILE] [--workspace DIR] [--judge] [--log FILE]
                  [--script FILE] [--fast LIB | --no-fast] -- COMMAND [ARG...]
    supervisor.py --check        exit 0 when supervision can be set up here

It starts COMMAND with a seccomp filter whose user notification holds every execve/execveat of
the command's process tree in the kernel, before anything is loaded; ordinary system calls, forks
and signals cost nothing. For each held exec the supervisor reads what would run from the
process's memory: the resolved program, argv, cwd, the environment variables that change what a
program does (GIT_*, LD_*, BASH_ENV...), what stdin is, and the chain of programs above it. The
policy answers allow, deny or ask; ask writes a request into the run's mailbox (the same files as
approval-gate.py) and keeps the exec held until the host's decision arrives. Deny makes execve
fail with EPERM: the process that asked goes on and sees an ordinary error, and the denied program
never runs. A program that cannot exist (no such file, not executable) gets the kernel's own error
at once, so a shell walking PATH is not held at every folder.

An allowed exec is let go with the process traced for just that exec (ptrace of a descendant; the
supervisor is the tree's subreaper, so orphans stay descendants): at the exec event the new image
is loaded but has not run one instruction, and the program and arguments the kernel actually copied
must be the ones judged, or they are judged afresh and a denied one is killed there. That closes
the window between reading the process's memory and the kernel copying it (another thread or
process rewriting argv). Then the process is let go untraced. The filter refuses what could steal
or undo the hold: ptrace, process_vm_writev, a second notification listener, and the 32-bit and
x32 exec entry points.

The per-exec hot path is compiled when the image has it (exec-fast.c, built into
/usr/local/lib/cairn/exec-fast.so; `--fast LIB` names another, `--no-fast` goes without): it
receives each held exec, reads its facts, and allows at once an exec whose exact facts the
rules allowed before (see Supervisor.offer for which verdicts it may keep); the exec event is
compared all the same. Without it everything is done here, with the same verdicts.

With `--rules FILE` (Cairn's own program rules, core/approvals_exec.py, which the host places
where the sandbox can read but not write it), an exec that no policy rule names is classified
here: what no rule family flags runs at once, what one flags is asked, and the host classifies
the request again before anyone sees it. Without it, the policy's default applies. Linux x86_64
only; elsewhere the command does not start.

Exit codes: the command's own (128+N when a signal N ended it); 121 when supervision cannot be set
up (one line on stderr says why; the command did not start); 127 when the command cannot be run.

Environment (the gate's): CAIRN_RUN_ID, CAIRN_EXEC_ID, CAIRN_APPROVAL_REQUESTS,
CAIRN_APPROVAL_DECISIONS, CAIRN_APPROVAL_TIMEOUT.
"""

# ruff: noqa: UP031 - %-formatting, like approval-gate.py: it runs on the image's python3 (3.8+)
# ruff: noqa: SIM105 - try/except, not contextlib: every import delays the start of each run

import _socket as socket  # the C module: socket.py imports much more (a slower start)
import ctypes
import errno
import fcntl
import os
import re
import select
import shlex
import signal
import stat
import struct
import sys
import threading
import time

UNSUPERVISED_EXIT = 121
NOT_FOUND_EXIT = 127
DEFAULT_TIMEOUT_S = 3600.0
POLL_S = 0.02
# Worker threads taking held execs from the listener, so two jobs that exec at once are not
# queued behind one another's exec events: WORKERS at first, one more whenever all are busy
# (tracing, or waiting for an answer), up to MAX_WORKERS; one ends when SPARE_WORKERS wait.
WORKERS = 2
SPARE_WORKERS = 8
MAX_WORKERS = 64
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
MAX_STR = 128 * 1024  # the kernel's MAX_ARG_STRLEN
MAX_ARGS = 8192
MAX_ENV_VALUE = 4096
MAX_CONFIG_BYTES = 64 * 1024
MAX_PARENTS = 8
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"

# What the environment tells a program to do besides its arguments: the judge needs these to see
# `GIT_CONFIG_KEY_0=core.hooksPath git commit` or `LD_PRELOAD=... ls`.
ENV_PREFIXES = ("GIT_", "LD_", "CAIRN_SCRIPT_", "NPM_CONFIG_", "npm_config_")
ENV_NAMES = frozenset(
    (
        "HOME",
        "PATH",
        "XDG_CONFIG_HOME",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PERL5OPT",
        "PERL5LIB",
        "NODE_OPTIONS",
        "RUBYOPT",
    )
)
LINE_VAR = "CAIRN_SCRIPT_LINE"

# -- ptrace, seccomp (x86_64) ----------------------------------------------------------------------

PTRACE_CONT = 7
PTRACE_DETACH = 17
PTRACE_GETEVENTMSG = 0x4201
PTRACE_SEIZE = 0x4206
PTRACE_LISTEN = 0x4208

O_TRACEEXEC = 0x10
O_EXITKILL = 0x100000
SEIZE_OPTIONS = O_TRACEEXEC | O_EXITKILL  # a process dies with its supervisor while it is held

EVENT_EXEC = 4
EVENT_STOP = 128

WALL = 0x40000000
WNOTHREAD = 0x20000000  # wait for this thread's own children and tracees only

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

NR_SECCOMP = 317
SECCOMP_SET_MODE_FILTER = 1
FILTER_FLAG_NEW_LISTENER = 1 << 3
FILTER_FLAG_WAIT_KILLABLE_RECV = 1 << 5  # a held exec is not restarted by an ordinary signal
NOTIF_FLAG_CONTINUE = 1
# ioctls of the listener: _IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, ...resp),
# _IOW('!', 2, __u64)
NOTIF_RECV = 0xC0502100
NOTIF_SEND = 0xC0182101
NOTIF_ID_VALID = 0x40082102
NOTIF_SET_FLAGS = 0x40082104  # _IOW('!', 4, __u64), Linux 6.6
FD_SYNC_WAKE_UP = 1  # the receiver runs on the CPU of the process it wakes: a quicker handoff
NOTIF_SIZE = 80  # struct seccomp_notif: id, pid, flags, seccomp_data (nr, arch, ip, args[6])
NOTIF_FORMAT = "<QIIiIQ6Q"
RESP_FORMAT = "<QqiI"  # struct seccomp_notif_resp: id, val, error, flags

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
X32_BIT = 0x40000000
NR_EXECVE = 59
NR_EXECVEAT = 322
NR_PTRACE = 101
NR_PROCESS_VM_WRITEV = 311
NR32_EXECVE = 11
NR32_EXECVEAT = 358
NR32_PTRACE = 26
NR32_PROCESS_VM_WRITEV = 348
NR32_SECCOMP = 354
RET_ALLOW = 0x7FFF0000
RET_USER_NOTIF = 0x7FC00000
RET_EPERM = 0x00050000 | errno.EPERM
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000

# The compiled hot path (resources/sandbox/exec-fast.c), which the image recipe builds here.
FAST_LIBRARY = "/usr/local/lib/cairn/exec-fast.so"
FAST_VERSION = 4  # exec-fast.c's cx_version: the calls and structures both sides agree on
CX_GONE, CX_NONE, CX_MISS, CX_HIT, CX_EVENT, CX_EXPECTED, CX_FRESH = -1, 0, 1, 2, 3, 4, 5
CX_TELL = 1  # cx_receive hands back each hit it let go too (for the log)


class CxOut(ctypes.Structure):
    """exec-fast.c's struct cx_out."""

    _fields_ = [
        ("id", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
        ("pid", ctypes.c_uint32),
        ("nr", ctypes.c_int32),
        ("facts_len", ctypes.c_uint32),
        ("token", ctypes.c_int32),
        ("argv_off", ctypes.c_uint32),
        ("argv_len", ctypes.c_uint32),
        ("env_off", ctypes.c_uint32),
        ("env_len", ctypes.c_uint32),
        ("dev", ctypes.c_uint64),
        ("ino", ctypes.c_uint64),
        ("no_links", ctypes.c_uint32),
        ("spare", ctypes.c_uint32),
    ]


def load_fast(path):
    """The compiled hot path, or (None, why not). Its calls release the interpreter lock."""
    try:
        lib = ctypes.CDLL(path, use_errno=True)
        if lib.cx_version() != FAST_VERSION:
            return None, "%s is another version" % path
    except (OSError, AttributeError) as exc:
        return None, str(exc)
    u32, u64, i32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32
    lib.cx_receive.restype = ctypes.c_int
    lib.cx_receive.argtypes = [ctypes.c_int, ctypes.POINTER(CxOut), ctypes.c_void_p, ctypes.c_int]
    lib.cx_let_go.restype = ctypes.c_int
    lib.cx_let_go.argtypes = [ctypes.c_int, u64, ctypes.c_int, ctypes.c_char_p, u32]
    lib.cx_let_go.argtypes += [ctypes.c_char_p, u32, u64, u64]
    lib.cx_owned.restype = ctypes.c_int
    lib.cx_owned.argtypes = []
    lib.cx_claim.restype = ctypes.c_int
    lib.cx_claim.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.cx_remember.restype = ctypes.c_int
    lib.cx_remember.argtypes = [ctypes.c_char_p, u32, ctypes.c_char_p, ctypes.c_char_p, i32]
    lib.cx_same_image.restype = ctypes.c_int
    lib.cx_same_image.argtypes = [ctypes.c_int, ctypes.c_char_p, u32, ctypes.c_char_p, u32]
    lib.cx_same_image.argtypes += [u64, u64]
    lib.cx_forget.restype = ctypes.c_int
    lib.cx_expect.restype = ctypes.c_int
    lib.cx_expect.argtypes = [ctypes.c_int, ctypes.c_char_p, u32, ctypes.c_char_p, u32, u64, u64]
    lib.cx_unexpect.restype = None
    lib.cx_unexpect.argtypes = [ctypes.c_int]
    lib.cx_follow.restype = ctypes.c_int
    lib.cx_follow.argtypes = [ctypes.c_void_p] * 3
    return lib, ""


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


class SetupError(Exception):
    """Supervision cannot be set up: the command must not start."""


_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.ptrace.restype = ctypes.c_long
        _libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        _libc.prctl.restype = ctypes.c_int
        _libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
        _libc.syscall.restype = ctypes.c_long
        _libc.syscall.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p]
    return _libc


def ptrace(request, pid, addr=0, data=0):
    result = libc().ptrace(request, pid, addr, data)
    if result == -1:
        err = ctypes.get_errno()
        if err:
            raise OSError(err, os.strerror(err))
    return result


def prctl(option, arg2=0, arg3=0):
    if libc().prctl(option, arg2, arg3, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def assemble(lines):
    """Classic BPF from (label, op, k, then, else) lines; `then`/`else` name labels (None: next)."""
    at = {line[0]: i for i, line in enumerate(lines) if line[0]}
    prog = []
    for i, (_label, op, k, then, other) in enumerate(lines):
        jt = at[then] - i - 1 if then else 0
        jf = at[other] - i - 1 if other else 0
        if not 0 <= jt < 256 or not 0 <= jf < 256:
            raise SetupError("a filter jump that BPF cannot make (line %d)" % i)
        prog.append((op, jt, jf, k))
    return prog


def bpf_program():
    """Hold (SECCOMP_RET_USER_NOTIF) every execve/execveat; refuse ptrace and process_vm_writev,
    so no process of the tree can reach into another's memory that way, and a second notification
    listener, which would take the exec from this one; 32-bit and x32 entry points to any of these
    are refused outright."""
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    return assemble(
        [
            (None, ld, 4, None, None),  # seccomp_data.arch
            (None, jeq, AUDIT_ARCH_X86_64, None, "other"),
            (None, ld, 0, None, None),  # seccomp_data.nr
            (None, jge, X32_BIT, "eperm", None),  # x32 numbers
            (None, jeq, NR_EXECVE, "hold", None),
            (None, jeq, NR_EXECVEAT, "hold", None),
            (None, jeq, NR_PTRACE, "eperm", None),
            (None, jeq, NR_PROCESS_VM_WRITEV, "eperm", None),
            (None, jeq, NR_SECCOMP, None, "allow"),
            (None, ld, 24, None, None),  # seccomp(op, flags, ...): the low half of flags
            (None, jset, FILTER_FLAG_NEW_LISTENER, "eperm", "allow"),
            # i386 via int 0x80: no exec, no ptrace, no filters of its own
            ("other", ld, 0, None, None),
            (None, jeq, NR32_EXECVE, "eperm", None),
            (None, jeq, NR32_EXECVEAT, "eperm", None),
            (None, jeq, NR32_PTRACE, "eperm", None),
            (None, jeq, NR32_PROCESS_VM_WRITEV, "eperm", None),
            (None, jeq, NR32_SECCOMP, "eperm", "allow"),
            ("allow", ret, RET_ALLOW, None, None),
            ("hold", ret, RET_USER_NOTIF, None, None),
            ("eperm", ret, RET_EPERM, None, None),
        ]
    )


# Why a filter with a notification listener is refused, in words that say what would fix it.
FILTER_FAILURES = {
    errno.EINVAL: "this kernel cannot hold a program start for a supervisor (Linux 5.5 or newer "
    "is needed)",
    errno.ENOSYS: "this kernel or the sandbox's seccomp profile has no seccomp() system call",
    errno.EPERM: "the sandbox's seccomp profile refuses seccomp filters",
    errno.EACCES: "the sandbox refuses seccomp filters (no_new_privs cannot be set)",
    errno.EBUSY: "another notification listener is installed already",
}


def install_filter():
    """Install the filter on this process (inherited by everything it starts); return the
    notification listener's file descriptor."""
    prog = bpf_program()
    arr = (SockFilter * len(prog))(*[SockFilter(c, jt, jf, k) for c, jt, jf, k in prog])
    fprog = SockFprog(len(prog), arr)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    flags = FILTER_FLAG_NEW_LISTENER | FILTER_FLAG_WAIT_KILLABLE_RECV
    fd = libc().syscall(NR_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.addressof(fprog))
    if fd < 0 and ctypes.get_errno() == errno.EINVAL:  # a kernel older than 5.19
        flags = FILTER_FLAG_NEW_LISTENER
        fd = libc().syscall(NR_SECCOMP, SECCOMP_SET_MODE_FILTER, flags, ctypes.addressof(fprog))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(
            err, "seccomp user notification: %s" % FILTER_FAILURES.get(err, os.strerror(err))
        )
    return fd


def check_arch():
    if sys.platform != "linux":
        raise SetupError("supervision needs Linux, this is %s" % sys.platform)
    machine = os.uname().machine
    if machine not in ("x86_64", "amd64"):
        raise SetupError("supervision supports x86_64 only, this machine is %s" % machine)
    if struct.calcsize("P") != 8:
        raise SetupError("supervision needs a 64-bit python3")


# -- reading a stopped tracee ----------------------------------------------------------------------


class Memory:
    """A stopped tracee's memory through /proc/PID/mem, read a page at a time."""

    PAGE = 4096

    def __init__(self, tid):
        self.fd = os.open("/proc/%d/mem" % tid, os.O_RDONLY)
        self.pages = {}

    def close(self):
        os.close(self.fd)

    def page(self, n):
        data = self.pages.get(n)
        if data is None:
            data = os.pread(self.fd, self.PAGE, n * self.PAGE)
            if not data:
                raise OSError(errno.EFAULT, "unreadable address")
            self.pages[n] = data
        return data

    def read(self, addr, size):
        out = []
        while size > 0:
            n, off = divmod(addr, self.PAGE)
            chunk = self.page(n)[off : off + size]
            if not chunk:
                raise OSError(errno.EFAULT, "unreadable address")
            out.append(chunk)
            addr += len(chunk)
            size -= len(chunk)
        return b"".join(out)

    def string(self, addr, limit=MAX_STR):
        n, off = divmod(addr, self.PAGE)
        page = self.page(n)
        end = page.find(b"\0", off)
        if end >= 0:
            return page[off : min(end, off + limit)]
        out = [page[off:]]
        total = len(out[0])
        while total < limit:
            n += 1
            page = self.page(n)
            end = page.find(b"\0")
            if end >= 0:
                out.append(page[:end])
                break
            out.append(page)
            total += len(page)
        return b"".join(out)[:limit]

    def pointers(self, addr, limit):
        """A NULL-terminated array of pointers; (pointers, truncated)."""
        found = []
        while addr and len(found) < limit:
            n, off = divmod(addr, self.PAGE)
            if off % 8:
                (value,) = struct.unpack("<Q", self.read(addr, 8))
                values = ((value,),)
                count = 1
            else:
                page = memoryview(self.page(n))[off:]
                values = struct.iter_unpack("<Q", page)
                count = len(page) // 8
            for (value,) in values:
                if value == 0:
                    return found, False
                found.append(value)
                if len(found) >= limit:
                    return found, True
            addr += 8 * count
        return found, bool(addr)


def fsdecode(raw):
    return raw.decode("utf-8", "surrogateescape")


def wanted_env(name):
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


def env_subset(entries):
    """The judged subset of an environment given as `NAME=value` byte strings."""
    out = {}
    for entry in entries:
        name, sep, value = entry.partition(b"=")
        if not sep:
            continue
        key = fsdecode(name)
        if wanted_env(key):
            out[key] = fsdecode(value[:MAX_ENV_VALUE])
    return out


def proc_path(pid, path):
    """`/proc/self/...` as the tracee means it (fexecve uses /proc/self/fd/N)."""
    for alias in ("/proc/self/", "/proc/thread-self/"):
        if path.startswith(alias):
            return "/proc/%d/%s" % (pid, path[len(alias) :])
    return path


def stdin_file(pid):
    """The file stdin reads (`cat < FILE`), when it is one; else ""."""
    try:
        target = os.readlink("/proc/%d/fd/0" % pid)
    except OSError:
        return ""
    return target if target.startswith("/") and not target.startswith("/dev/") else ""


def stdin_kind(pid):
    try:
        target = os.readlink("/proc/%d/fd/0" % pid)
    except OSError:
        return "closed"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("socket:"):
        return "socket"
    if target.startswith("/dev/pts/") or target in ("/dev/tty", "/dev/console"):
        return "tty"
    if target == "/dev/null":
        return "null"
    return "file"


INTERPRETER_RE = re.compile(
    r"^(?:(?:ba|da|z|k|mk|a|po|y)?sh|python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node(?:js)?"
    r"|php[0-9.]*|lua[0-9.]*|tclsh[0-9.]*|R|Rscript|osascript)$"
)
# Options after which the program comes from the argument list, not from stdin.
PROGRAM_OPTIONS = {"sh": ("c",), "python": ("c", "m"), "perl": ("e", "E"), "ruby": ("e",)}
PROGRAM_LONG_OPTIONS = ("--eval", "--print", "--command")
OPTIONS_WITH_VALUE = {"sh": "oO", "python": "WXQ", "perl": "IMmdx", "ruby": "IrCEFK"}


def interpreter_family(name):
    if not INTERPRETER_RE.match(name):
        return None
    if name.endswith("sh") and not name.startswith(("python", "pypy")):
        return "sh"
    for family in ("python", "pypy", "perl", "ruby", "node"):
        if name.startswith(family):
            return "python" if family == "pypy" else family
    return "other"


def reads_program_from_stdin(name, argv):
    """Whether an interpreter invoked as `argv` takes its program from stdin (`sh`, `bash -s`,
    `python3 -`, `perl`): what `curl URL | sh` looks like once it runs. Kept identical to
    core/approvals_exec.py (a test compares them)."""
    family = interpreter_family(name)
    if family is None:
        return False
    short = PROGRAM_OPTIONS.get(family, ("e",))
    with_value = OPTIONS_WITH_VALUE.get(family, "")
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-":
            return True
        if arg == "--":
            return i + 1 >= len(args) or args[i + 1] == "-"
        if arg.startswith("--"):
            if arg.split("=", 1)[0] in PROGRAM_LONG_OPTIONS:
                return False
            i += 1
            continue
        if arg.startswith(("-", "+")) and len(arg) > 1:
            letters = arg[1:]
            if family == "sh" and "s" in letters:
                return True
            for j, letter in enumerate(letters):
                if letter in short:
                    return False
                if letter in with_value:
                    if j == len(letters) - 1:
                        i += 1  # the value is the next argument
                    break
            i += 1
            continue
        return False  # a script file
    return True


def started(pid):
    """When the process started (in clock ticks since boot, from /proc), or None when gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def shebang_of(path):
    """The interpreter line of a script (`#!/bin/sh -e` -> ['/bin/sh', '-e']), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].strip()
    if not line:
        return None
    interp, _, arg = line.partition(b" ")
    words = [fsdecode(interp)]
    if arg.strip():
        words.append(fsdecode(arg.strip()))
    return words


_realpaths = {}
_shebangs = {}


def realpath_cached(path):
    """realpath, remembered for paths in the image's read-only folders, where no link can
    change. Anywhere else it is looked up each time: a link in the workspace pointed at another
    program gives the same file identity at the exec event as the program judged, but under
    the old name (`tool -> ls` then `tool -> cat` would be judged as ls)."""
    if not path.startswith(SYSTEM_PREFIXES) or "/." in path:
        return os.path.realpath(path)
    found = _realpaths.get(path)
    if found is None:
        found = os.path.realpath(path)
        if len(_realpaths) > 4096:
            _realpaths.clear()
        _realpaths[path] = found
    return found


def shebang(path, st):
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    if key not in _shebangs:
        if len(_shebangs) > 4096:
            _shebangs.clear()
        _shebangs[key] = shebang_of(path)
    return _shebangs[key]


def identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class Exec:
    """What one program start would run, as read from the tracee (which is stopped while this is
    in use: `stdin` is read when first asked)."""

    __slots__ = (
        "pid",
        "path",
        "program",
        "argv",
        "cwd",
        "env",
        "interpreter",
        "truncated",
        "ident",
        "observed",
        "raw",
        "opened",
        "_stdin",
        "stdin_path",
        "facts",
        "st",
        "no_links",
    )

    def __init__(self, pid, path, program, argv, cwd, env, truncated, observed):
        self.pid = pid
        self.path = path
        self.program = program
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.interpreter = None
        self.truncated = truncated
        self.ident = None
        self.observed = observed
        self.raw = None  # (cmdline, environ) as the kernel will copy them, when read whole
        self.opened = program  # the name the kernel will open (`/proc/PID/fd/N` for a memfd)
        self._stdin = None
        self.stdin_path = None  # read with stdin, when the compiled path read the facts
        self.facts = None  # the compiled path's facts bytes this was read from
        self.st = None  # the program's stat, as judged
        self.no_links = False  # the compiled path found no argument leading through a link

    @property
    def stdin(self):
        if self._stdin is None:
            self._stdin = stdin_kind(self.pid)
        return self._stdin

    def key(self):
        """The same program start, as a PATH walk retries it: program, arguments, environment."""
        return (self.program, tuple(self.argv), tuple(sorted(self.env.items())))

    def names(self):
        return {os.path.basename(self.program), os.path.basename(self.argv[0]) if self.argv else ""}

    def program_from_stdin(self):
        """An interpreter taking its program from a pipe or socket (`curl ... | sh`)."""
        return any(reads_program_from_stdin(n, self.argv) for n in self.names()) and (
            self.stdin in ("pipe", "socket")
        )


def read_held_exec(tid, nr, args):
    """The execve/execveat a process is held at (its system call number and arguments, from the
    notification), read from its memory."""
    if nr == NR_EXECVE:
        dirfd, path_p, argv_p, envp_p, flags = AT_FDCWD, args[0], args[1], args[2], 0
    else:
        dirfd = ctypes.c_int(args[0] & 0xFFFFFFFF).value
        path_p, argv_p, envp_p, flags = args[1], args[2], args[3], args[4]
    mem = Memory(tid)
    try:
        path = fsdecode(mem.string(path_p, 4096)) if path_p else ""
        ptrs, truncated = mem.pointers(argv_p, MAX_ARGS)
        raw_argv = [mem.string(p) for p in ptrs]
        env_ptrs, env_truncated = mem.pointers(envp_p, MAX_ARGS)
        entries = [mem.string(p) for p in env_ptrs]
    finally:
        mem.close()
    argv = [fsdecode(a) for a in raw_argv]
    cwd = os.readlink("/proc/%d/cwd" % tid)
    if path.startswith("/"):
        where = proc_path(tid, path)
    elif dirfd == AT_FDCWD:
        where = os.path.join(cwd, path)
    else:
        base = "/proc/%d/fd/%d" % (tid, dirfd)
        where = base if (not path and flags & AT_EMPTY_PATH) else os.path.join(base, path)
    program = realpath_cached(where)
    absolute = os.path.normpath(where) if not where.startswith("/proc/") else program
    found = Exec(tid, absolute, program, argv, cwd, env_subset(entries), truncated, False)
    found.opened = where
    if raw_argv and not truncated and not env_truncated:
        # What the kernel will copy, byte for byte: the exec event compares it as it is.
        found.raw = (proc_image(raw_argv), proc_image(entries))
    return found


def exec_from_facts(tid, facts):
    """The same Exec as read_held_exec, from the facts the compiled path read (exec-fast.c's
    read_facts: an execve, or an execveat from the working folder, read whole)."""
    fields = []
    at = 12
    for _ in range(5):
        (size,) = struct.unpack_from("<I", facts, at)
        fields.append(facts[at + 4 : at + 4 + size])
        at += 4 + size
    raw_path, raw_cwd, raw_stdin, argv_image, env_image = fields
    raw_argv = argv_image.split(b"\0")[:-1]
    entries = env_image.split(b"\0")[:-1]
    path = fsdecode(raw_path)
    cwd = fsdecode(raw_cwd)
    where = path if path.startswith("/") else os.path.join(cwd, path)
    program = realpath_cached(where)
    found = Exec(tid, os.path.normpath(where), program, [fsdecode(a) for a in raw_argv], cwd,
                 env_subset(entries), False, False)  # fmt: skip
    found.opened = where
    found.raw = (argv_image, env_image)
    kind, stdin_path = raw_stdin.split(b"\0")[:2]
    found._stdin = kind.decode("ascii")
    found.stdin_path = fsdecode(stdin_path)
    found.facts = facts
    return found


class Judged:
    """An exec the compiled path found allowed already, until its exec event."""

    __slots__ = ("raw", "ident", "interpreter")

    def __init__(self, raw, ident):
        self.raw = raw
        self.ident = ident
        self.interpreter = None

    @property
    def argv(self):
        return [fsdecode(a) for a in self.raw[0].split(b"\0")[:-1]]


def proc_image(strings):
    """Strings as /proc/PID/cmdline and /proc/PID/environ show them."""
    return b"".join(s + b"\0" for s in strings)


def read_proc_bytes(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            chunks.append(chunk)
            if len(chunk) < 65536:
                break  # /proc's cmdline and environ read whole unless at the end
    finally:
        os.close(fd)
    return b"".join(chunks)


def loaded_as_judged(pid, judged, fast=None):
    """Whether the image loaded at the exec event is, byte for byte, the one judged (the quick
    check: False sends it to the full comparison, never lets anything through)."""
    if judged.raw is None or judged.interpreter:
        return False
    argv, env = judged.raw
    if fast is not None and judged.ident is not None:
        dev, ino = judged.ident
        found = fast.cx_same_image(pid, argv, len(argv), env, len(env), dev, ino)
        if found < 0:
            raise OSError(-found, os.strerror(-found))
        return found == 1
    if read_proc_bytes("/proc/%d/cmdline" % pid) != argv:
        return False
    if read_proc_bytes("/proc/%d/environ" % pid) != env:
        return False
    return identity("/proc/%d/exe" % pid) == judged.ident


def read_proc_split(path):
    parts = read_proc_bytes(path).split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def read_exec_event(pid, full):
    """The program a process holds right after exec (exec event), from /proc: what the kernel
    actually loaded and copied. `full` also reads the working folder."""
    exe = "/proc/%d/exe" % pid
    program = os.readlink(exe) if full else exe
    argv = [fsdecode(a) for a in read_proc_split("/proc/%d/cmdline" % pid)]
    env = env_subset(read_proc_split("/proc/%d/environ" % pid))
    cwd = os.readlink("/proc/%d/cwd" % pid) if full else ""
    found = Exec(pid, program, program, argv, cwd, env, False, True)
    found.ident = identity(exe)
    return found


def same_exec(judged, loaded):
    """Whether the image loaded at the exec event is the one judged at the seccomp stop."""
    if judged.env != loaded.env:
        return False
    if judged.interpreter:
        # `#!interp arg` runs interp [arg] PATH ARGV[1:]: the interpreter is what loaded.
        rest = judged.argv[1:]
        if loaded.ident != identity(judged.interpreter[0]):
            return False
        if len(loaded.argv) < len(rest) + 1:
            return False
        return loaded.argv[len(loaded.argv) - len(rest) :] == rest if rest else True
    return loaded.ident == judged.ident and loaded.argv == judged.argv


# -- policy ----------------------------------------------------------------------------------------

ALLOW, DENY, ASK = "allow", "deny", "ask"
ACTIONS = (ALLOW, DENY, ASK)


class Policy:
    """Rules tried in order: the first whose predicates all hold gives the action; otherwise the
    default. Predicates: `programs` (basenames of the program or of argv[0]; "*" for any),
    `args_all`, `args_any` (tokens among argv[1:]), `args_prefix` (argv[1:] starts with),
    `argv_regex` (searched in the shell-quoted argv), `env_any` (variables present),
    `program_from_stdin` (true: an interpreter reading its program from a pipe)."""

    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise ValueError("a policy is a JSON object")
        self.default = doc.get("default", ASK)
        if self.default not in ACTIONS:
            raise ValueError("default must be one of %s" % ", ".join(ACTIONS))
        self.rules = []
        for i, rule in enumerate(doc.get("rules", [])):
            if not isinstance(rule, dict) or rule.get("action") not in ACTIONS:
                raise ValueError("rule %d needs an action among %s" % (i, ", ".join(ACTIONS)))
            compiled = dict(rule)
            if "argv_regex" in rule:
                compiled["argv_regex"] = re.compile(rule["argv_regex"])
            compiled.setdefault("id", "policy-%d" % i)
            self.rules.append(compiled)

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            import json  # only when asked: a run's start waits for every import

            return cls(json.loads(f.read().decode("utf-8")))

    def decide(self, ex):
        if not self.rules:
            return self.default, "default"
        names = ex.names()
        args = ex.argv[1:]
        for rule in self.rules:
            programs = rule.get("programs")
            if programs is not None and "*" not in programs and not names & set(programs):
                continue
            if "args_all" in rule and not all(a in args for a in rule["args_all"]):
                continue
            if "args_any" in rule and not any(a in args for a in rule["args_any"]):
                continue
            prefix = rule.get("args_prefix")
            if prefix is not None and args[: len(prefix)] != list(prefix):
                continue
            regex = rule.get("argv_regex")
            if regex is not None and not regex.search(shlex.join(ex.argv)):
                continue
            if "env_any" in rule and not any(n in ex.env for n in rule["env_any"]):
                continue
            if "program_from_stdin" in rule and (
                bool(rule["program_from_stdin"]) != ex.program_from_stdin()
            ):
                continue
            return rule["action"], rule["id"]
        return self.default, "default"


# -- the mailbox (approval-gate.py's format) -------------------------------------------------------


def _base36(n, width):
    out = []
    for _ in range(width):
        n, r = divmod(n, 36)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def new_request_id():
    ms = int(time.time() * 1000)
    return "ap_" + _base36(ms, 9) + _base36(int.from_bytes(os.urandom(5), "big"), 5)


class Mailbox:
    def __init__(self, environ):
        exec_id = environ.get("CAIRN_EXEC_ID")
        if not exec_id:
            raise SetupError("--judge needs CAIRN_EXEC_ID (this is not a Cairn run)")
        self.exec_id = exec_id
        self.run_id = environ.get("CAIRN_RUN_ID", "")
        self.requests = environ.get("CAIRN_APPROVAL_REQUESTS") or (
            "/cairn/runs/%s/requests" % exec_id
        )
        self.decisions = environ.get("CAIRN_APPROVAL_DECISIONS") or (
            "/cairn/decisions/%s" % exec_id
        )
        try:
            self.timeout = float(environ.get("CAIRN_APPROVAL_TIMEOUT") or DEFAULT_TIMEOUT_S)
        except ValueError:
            self.timeout = DEFAULT_TIMEOUT_S
        if self.timeout <= 0:
            self.timeout = DEFAULT_TIMEOUT_S
        self.digests = {}  # request id -> sha256 of the bytes written
        try:
            os.makedirs(self.requests, exist_ok=True)
        except OSError as exc:
            raise SetupError(
                "cannot write requests to %s: %s" % (self.requests, exc.strerror)
            ) from None

    def send(self, request):
        request_id = new_request_id()
        doc = dict(request, id=request_id, run_id=self.run_id, exec_id=self.exec_id)
        doc["created_at"] = time.time()
        final = os.path.join(self.requests, request_id + ".json")
        tmp = os.path.join(self.requests, "." + request_id + ".json.tmp")
        import hashlib
        import json

        data = json.dumps(doc, sort_keys=True).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        # The folder is writable by the run: the host echoes the digest of what it read, and a
        # decision about other bytes than these is no decision about this request.
        self.digests[request_id] = hashlib.sha256(data).hexdigest()
        return request_id, time.monotonic() + self.timeout

    def answer(self, request_id):
        """(allowed, reason) once decided, else None."""
        path = os.path.join(self.decisions, request_id + ".json")
        try:
            with open(path, "rb") as f:
                import json

                doc = json.loads(f.read().decode("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict):
            return None
        reason = str(doc.get("reason") or "")
        if doc.get("request_sha256") != self.digests.get(request_id):
            return False, "the request was changed in the sandbox before it was judged"
        if doc.get("decision") == "allow":
            return True, reason or "allowed"
        return False, reason or "denied"


# -- which program a copy is ---------------------------------------------------------------------

# The image's own programs: the root filesystem is read-only, so nothing under these was written by
# the run. A program elsewhere (the workspace, the home) may be a copy of one of them under another
# name (`cp /usr/bin/git ./tig; ./tig push`): it is named by the ELF build id it shares with them,
# which appending bytes or renaming does not change.
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/lib32/", "/opt/", "/etc/")
INDEX_FOLDERS = (
    *("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"),
    "/usr/lib/git-core",
)
MAX_SAME_AS = 8
PT_NOTE = 4
NT_GNU_BUILD_ID = 3


def elf_build_id(path):
    """The GNU build id of a 64-bit little-endian ELF file (bytes), or None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.pread(fd, 64, 0)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return None
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        if phentsize < 56 or phnum > 128:
            return None
        table = os.pread(fd, phentsize * phnum, phoff)
        for n in range(phnum):
            entry = table[n * phentsize : (n + 1) * phentsize]
            if len(entry) < 56:
                return None
            (p_type,) = struct.unpack_from("<I", entry, 0)
            if p_type != PT_NOTE:
                continue
            (offset,) = struct.unpack_from("<Q", entry, 8)
            (size,) = struct.unpack_from("<Q", entry, 32)
            notes = os.pread(fd, min(size, 4096), offset)
            at = 0
            while at + 12 <= len(notes):
                namesz, descsz, kind = struct.unpack_from("<III", notes, at)
                name_end = at + 12 + ((namesz + 3) & ~3)
                desc_end = name_end + ((descsz + 3) & ~3)
                if kind == NT_GNU_BUILD_ID and notes[at + 12 : at + 12 + namesz] == b"GNU\0":
                    found = notes[name_end : name_end + descsz]
                    return found or None
                at = desc_end
        return None
    except (OSError, struct.error):
        return None
    finally:
        os.close(fd)


_system_ids = None
_build_ids = {}


def system_build_ids():
    """{build id: [paths]} over the image's program folders, read once."""
    global _system_ids
    if _system_ids is None:
        found = {}
        for folder in INDEX_FOLDERS:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
                    continue
                build_id = build_id_of(path, st)
                if build_id:
                    paths = found.setdefault(build_id, [])
                    if path not in paths and len(paths) < MAX_SAME_AS:
                        paths.append(path)
        _system_ids = found
    return _system_ids


def build_id_of(path, st):
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    if key not in _build_ids:
        if len(_build_ids) > 8192:
            _build_ids.clear()
        _build_ids[key] = elf_build_id(path)
    return _build_ids[key]


def same_as(program, readable=None):
    """The image's programs a program outside the image's folders is a copy of, by build id.
    `readable` opens the same file when its name does not (a memfd: `/proc/PID/exe`)."""
    if not program.startswith("/") or program.startswith(SYSTEM_PREFIXES):
        return []
    program = readable or program
    try:
        st = os.stat(program)
    except OSError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return []
    build_id = build_id_of(program, st)
    if not build_id:
        return []
    return list(system_build_ids().get(build_id, []))


# -- where arguments lead -------------------------------------------------------------------------

MAX_LINK_WORDS = 256


def kernel_path(path):
    """Where the kernel finds `path`, its last part not followed (None: not there), and "" for a
    symbolic link: one lookup instead of one per folder."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            return ""
        return os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return ""
    finally:
        os.close(fd)


def links_of(ex):
    """Arguments naming a path that leads elsewhere through a symbolic link: word -> [the file it
    names, the word with only its folders resolved] (`rm -rf link/` empties the target, `rm -rf
    link` removes the link). Words that are not existing paths are left out."""
    out = {}
    for word in ex.argv[1 : 1 + MAX_LINK_WORDS]:
        if word.startswith("-") and "=" in word:
            word = word.split("=", 1)[1]
        if not word or word.startswith("-") or len(word) > 4096 or word in out:
            continue
        path = os.path.join(ex.cwd or "/", word)
        follows = word.endswith(("/", "/.")) or word.endswith("/..")
        if not follows:
            found = kernel_path(path)
            if found is None:
                continue  # not there (lexists would say so)
            if found == os.path.normpath(path):
                continue  # no link on the way: where it is is what it says
        try:
            if not os.path.lexists(path):
                continue
            plain = os.path.normpath(path)
            real = os.path.realpath(path)
            head, tail = os.path.split(plain)
            follows = word.endswith(("/", "/.")) or not tail  # `link/` is what it points to
            parent = real if follows else os.path.join(os.path.realpath(head), tail)
        except (OSError, ValueError):
            continue
        if real != plain or parent != plain:
            out[word] = [real, parent]
    return out


# -- the supervisor --------------------------------------------------------------------------------


def git_config_files(ex, aliases=()):
    """The git configuration files git would read for this exec, as the sandbox sees them (the
    host resolves aliases from them): global, XDG, and the repository's own."""
    names = [os.path.basename(p) for p in aliases]
    if (
        os.path.basename(ex.program) != "git"
        and "git" not in names
        and not os.path.basename(ex.argv[0] if ex.argv else "").startswith("git")
    ):
        return {}
    home = ex.env.get("HOME") or os.environ.get("HOME") or "/"
    xdg = ex.env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    if ex.env.get("GIT_CONFIG_GLOBAL"):
        # It replaces both of the user's files (git reads neither then).
        candidates = [ex.env["GIT_CONFIG_GLOBAL"]]
    else:
        # In git's order: the later file's settings win.
        candidates = [os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")]
    cwd = ex.cwd
    args = ex.argv[1:]
    for i, arg in enumerate(args):
        if arg == "-C" and i + 1 < len(args):
            cwd = os.path.join(cwd, args[i + 1])
        elif not arg.startswith("-"):
            break
    git_dir = ex.env.get("GIT_DIR")
    if git_dir:
        candidates.append(os.path.join(cwd, git_dir, "config"))
    else:
        here = os.path.abspath(cwd)
        while True:
            dot = os.path.join(here, ".git")
            if os.path.isdir(dot):
                candidates.append(os.path.join(dot, "config"))
                break
            if os.path.isfile(os.path.join(here, "config")) and os.path.isdir(
                os.path.join(here, "objects")
            ):
                candidates.append(os.path.join(here, "config"))
                break
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
    out = {}
    for path in candidates:
        try:
            with open(path, "rb") as f:
                out[path] = fsdecode(f.read(MAX_CONFIG_BYTES))
        except OSError:
            continue
    return out


def load_rules(path):
    """Cairn's program rules (a module exposing ExecFacts and classify_exec) from a file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cairn_exec_rules", path)
    if spec is None or spec.loader is None:
        raise SetupError("cannot load the program rules from %s" % path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cairn_exec_rules"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure means: cannot judge, do not start
        raise SetupError("cannot load the program rules from %s: %s" % (path, exc)) from None
    for name in ("ExecFacts", "classify_exec"):
        if not hasattr(module, name):
            raise SetupError("%s has no %s" % (path, name))
    return module


def facts_key(request):
    """Everything of a request the program rules read (core/approvals_exec.py's
    ExecFacts.from_request), as a key."""
    return (
        request["program"],
        tuple(request["argv"]),
        request["cwd"],
        tuple(sorted(request["env"].items())),
        request["stdin"],
        request["stdin_path"],
        tuple(sorted((word, tuple(pair)) for word, pair in request["links"].items())),
        tuple(sorted(request["git_config"].items())),
        tuple(request["same_as"]),
        request["workspace"],
    )


class Supervisor:
    def __init__(
        self, policy, mailbox=None, log=None, script=None, rules=None, workspace=None, fast=None
    ):
        self.policy = policy
        self.fast = fast  # the compiled hot path (load_fast), or None: all of it here
        self.rules = rules
        self.workspace = workspace  # where the workspace is as the run sees it (the rules ask)
        self.mailbox = mailbox
        self.log = log
        self.script_lines = None
        if script:
            try:
                with open(script, "rb") as f:
                    self.script_lines = fsdecode(f.read()).splitlines()
            except OSError:
                self.script_lines = None
        self.reaper = None  # the process that is the tree's parent (see start)
        self.listener = None  # the seccomp notification listener
        self.lock = threading.Lock()
        # Held by the worker that waits on the listener, until the exec it takes is answered.
        self.receiving = threading.Lock()
        self.poller = None
        self.here = threading.local()  # .mine: the tids this worker traces
        self.workers = self.idle = 0
        # tid -> the tracing worker's set: traced until its exec event (an allowed exec let go)
        self.traced = {}
        self.program = {}  # pid -> the argv it runs (what "started by" shows)
        self.verdicts = {}  # the facts the rules read -> their verdict (the rules are pure)
        self.pending = {}  # tid -> Exec judged allowed, until its exec event
        # tid -> what it was last refused (execvp retries it along PATH), and when the process
        # started (a later process with the same pid is another)
        self.refused = {}
        self.waiting = {}  # tid -> [request id, deadline, Exec, held, rule]
        self.rule_names = []  # what allowed the compiled path's cache entries, by token
        self.status = None

    # which programs lead here, nearest first
    def parent_of(self, pid):
        """The parent as /proc tells, within the supervised tree (the supervisor is its
        subreaper, so orphans stay in it)."""
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                found = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None if found in (0, 1, os.getpid(), self.reaper) else found

    def parents_of(self, pid):
        chain = []
        here = self.parent_of(pid)
        while here is not None and len(chain) < MAX_PARENTS:
            argv = self.program.get(here)
            if argv is None:  # let go by the compiled path: what it runs, as it shows it
                try:
                    argv = [fsdecode(w) for w in read_proc_split("/proc/%d/cmdline" % here)]
                except OSError:
                    argv = None
            chain.append({"pid": here, "program": shlex.join(argv)[:256] if argv else ""})
            here = self.parent_of(here)
        return chain

    def script_line(self, ex):
        raw = ex.env.get(LINE_VAR)
        if not raw or not raw.isdigit():
            return None
        number = int(raw)
        text = None
        if self.script_lines is not None and 0 < number <= len(self.script_lines):
            text = self.script_lines[number - 1][:4096]
        return {"number": number, "text": text}

    def request_of(self, ex, rule):
        """What the program rules classify by; `shown` adds what only a person reads."""
        copies = same_as(ex.program, "/proc/%d/exe" % ex.pid if ex.observed else ex.opened)
        return {
            "engine": "shell",
            "tool": "exec",
            "cwd": ex.cwd,
            "program": ex.program,
            "path": ex.path,
            "argv": ex.argv,
            "argv_truncated": ex.truncated,
            "env": ex.env,
            "pid": ex.pid,
            "stdin": ex.stdin,
            "stdin_path": (
                (ex.stdin_path if ex.stdin_path is not None else stdin_file(ex.pid))
                if ex.stdin == "file"
                else ""
            ),
            "links": {} if ex.no_links else links_of(ex),
            "interpreter": ex.interpreter,
            "git_config": git_config_files(ex, copies),
            "same_as": copies,
            "observed_after_exec": ex.observed,
            "policy_rule": rule,
            "workspace": self.workspace or "/workspace",
        }

    def shown(self, request, ex):
        request["command"] = shlex.join(ex.argv) if ex.argv else ex.program
        request["parents"] = self.parents_of(ex.pid)
        request["script_line"] = self.script_line(ex)
        return request

    def record(self, ex, verdict, rule, reason, request_id=None, cached=False):
        if self.log is None:
            return
        entry = {
            "pid": ex.pid,
            "program": ex.program,
            "argv": ex.argv,
            "cwd": ex.cwd,
            "env": ex.env,
            "stdin": ex.stdin,
            "verdict": verdict,
            "rule": rule,
            "reason": reason,
            "observed_after_exec": ex.observed,
        }
        if request_id:
            entry["request"] = request_id
        if cached:
            entry["cached"] = True  # allowed by the compiled path's cache
        with self.lock:
            import json

            self.log.write(json.dumps(entry, sort_keys=True) + "\n")
            self.log.flush()

    # -- verdicts --

    def classify(self, ex, request):
        """(action, rule, verdict) from the program rules; anything that cannot be classified is
        asked. The rules are a pure function of the facts, so a verdict is kept for the same
        facts (a build runs the same commands again and again)."""
        try:
            key = facts_key(request)
        except (KeyError, TypeError, AttributeError):
            key = None
        found = self.verdicts.get(key) if key is not None else None
        if found is None:
            try:
                verdict = self.rules.classify_exec(self.rules.ExecFacts.from_request(request))
            except Exception as exc:  # noqa: BLE001 - what the rules cannot read goes to a person
                return ASK, "unclassified", {"rule": None, "reason": "cannot classify: %s" % exc}
            found = (verdict.action, verdict.rule, verdict.reason, verdict.what)
            if key is not None:
                if len(self.verdicts) > 4096:
                    self.verdicts.clear()
                self.verdicts[key] = found
        action, rule, reason, what = found
        shown = {"rule": rule, "reason": reason, "what": what}
        if action == ALLOW:
            return ALLOW, rule or "rules", shown
        return ASK, rule or "rules", shown

    def judge(self, tid, ex, held):
        """Decide now, or ask and wait here for the answer (the exec stays held; other workers
        go on with other execs). `held` is the notification id of an exec held before it runs,
        None for one seen at its exec event (by this thread, its tracer)."""
        action, rule = self.policy.decide(ex)
        request = None
        if rule == "default" and self.rules is not None:
            request = self.request_of(ex, rule)
            action, rule, request["verdict"] = self.classify(ex, request)
            request["policy_rule"] = rule
        if action == ALLOW and self.fast is not None and held is not None:
            self.offer(ex, request, rule)
        if action == ASK and self.mailbox is None:
            action = DENY
            rule = rule + " (ask, with nobody to ask)"
        if action == ASK:
            try:
                request_id, deadline = self.mailbox.send(
                    self.shown(request or self.request_of(ex, rule), ex)
                )
            except OSError as exc:
                self.finish(tid, ex, held, False, rule, "cannot ask: %s" % exc)
                return
            entry = [request_id, deadline, ex, held, rule]
            with self.lock:
                self.waiting[tid] = entry
            self.claim(tid)
            self.await_answer(tid, entry)
            return
        self.finish(tid, ex, held, action == ALLOW, rule, "policy")

    def offer(self, ex, request, rule):
        """Let the compiled path allow these exact facts from now on, when the verdict depends
        on nothing outside them: facts it read itself (whole, an execve from the working
        folder), a program of the image's read-only folders (not a copy named by its build id)
        that is no script, and not git (whose verdict reads configuration files), with no
        argument leading through a symbolic link (checked again at each use)."""
        st = ex.st
        if ex.facts is None or st is None or ex.interpreter or ex.observed or ex.raw is None:
            return
        if not ex.program.startswith(SYSTEM_PREFIXES):
            return
        if os.path.basename(ex.program) == "git" or (
            ex.argv and os.path.basename(ex.argv[0]).startswith("git")
        ):
            return
        if request is not None and (
            request["links"] or request["git_config"] or request["same_as"]
        ):
            return
        with self.lock:
            token = len(self.rule_names)
            if token > 4096:
                self.rule_names = []
                self.fast.cx_forget()
                token = 0
            self.rule_names.append(rule)
        ident = struct.pack(
            "<8q", st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size,
            st.st_mtime_ns, st.st_ctime_ns,
        )  # fmt: skip
        self.fast.cx_remember(ex.facts, len(ex.facts), os.fsencode(ex.program), ident, token)

    def await_answer(self, tid, entry):
        """Poll the mailbox until the request is decided or times out, then finish the exec. A
        spare worker takes the listener meanwhile."""
        self.hand_over()
        self.spare()
        request_id, deadline = entry[0], entry[1]
        while True:
            answer = self.mailbox.answer(request_id)
            if answer is not None or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        with self.lock:
            if self.waiting.get(tid) is entry:
                del self.waiting[tid]
        self.claim(tid)
        if answer is None:
            answer = (False, "no decision within %g s" % self.mailbox.timeout)
        # entry[3]: the exec's latest hold (a hold interrupted and made again keeps its question)
        try:
            self.finish(tid, entry[2], entry[3], answer[0], entry[4], answer[1], request_id)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise

    def finish(self, tid, ex, held, allowed, rule, reason, request_id=None):
        self.record(ex, ALLOW if allowed else DENY, rule, reason, request_id)
        if held is None:
            # At the exec event (this thread traces it): the new image is loaded but has not run.
            if not allowed:
                # It never runs. It stays traced until its end is waited for here (follow):
                # its parent can reap it only then.
                os.kill(tid, signal.SIGKILL)
                return
            self.remember(tid, ex)
            self.detach(tid)
            return
        if allowed:
            if self.let_go(tid, held, ex):
                return
            reason = "cannot watch the exec happen"
        self.refused[tid] = (ex.key(), started(tid))
        self.claim(tid)
        self.respond(held, errno.EPERM)
        self.say("cairn: denied %s (%s)" % (shlex.join(ex.argv)[:300], reason))

    def let_go(self, tid, held, ex):
        """Trace the process (from this thread) for its exec event, then let the held exec go
        on. A process another worker traces already (its last exec failed before loading, so no
        exec event came) stays that worker's: its exec event goes there."""
        if self.fast is not None and self.let_go_fast(tid, held, ex):
            return True
        mine = self.here.mine
        with self.lock:
            tracer = self.traced.get(tid)
            if tracer is None:
                try:
                    ptrace(PTRACE_SEIZE, tid, 0, SEIZE_OPTIONS)
                except OSError as exc:
                    return exc.errno == errno.ESRCH  # gone meanwhile: nothing runs
                self.traced[tid] = mine
                mine.add(tid)
            self.pending[tid] = ex
            self.expect(tid, ex)
        self.respond(held, 0, NOTIF_FLAG_CONTINUE)
        return True

    def let_go_fast(self, tid, held, ex):
        """Let the compiled path trace the process until its exec event and compare it there
        (this side hears of it again only when what loaded differs); False when it is this
        side's to do: a script or an exec not read whole (compared here), or a process a worker
        here traces already. What the process was refused before is forgotten: it runs
        something else now."""
        if ex.raw is None or ex.ident is None or ex.interpreter:
            return False
        with self.lock:
            if tid in self.traced:
                return False
            self.pending.pop(tid, None)
            refused = self.refused.pop(tid, None)
        if refused is not None:
            self.claim(tid)
        argv, env = ex.raw
        dev, ino = ex.ident[0], ex.ident[1]
        code = self.fast.cx_let_go(
            self.listener, held, tid, argv, len(argv), env, len(env), dev, ino
        )
        if code == -errno.EPERM:
            return False
        if code < 0 and code != -errno.ESRCH:
            raise OSError(-code, os.strerror(-code))
        return True  # ESRCH: gone meanwhile, nothing runs

    def claim(self, tid):
        """Every held exec of a process refused or asked here comes here (its answer is kept
        here), not to the compiled path's cache."""
        if self.fast is not None:
            self.fast.cx_claim(tid, int(tid in self.refused or tid in self.waiting))

    def expect(self, tid, ex):
        """Tell the compiled path what tid was judged as, so its exec event is compared there;
        a script, or an exec not read whole, is compared here."""
        if self.fast is None:
            return
        if ex.raw is None or ex.ident is None or ex.interpreter:
            self.fast.cx_unexpect(tid)
            return
        argv, env = ex.raw
        self.fast.cx_expect(tid, argv, len(argv), env, len(env), ex.ident[0], ex.ident[1])

    def remember(self, pid, ex):
        if len(self.program) > 4096:
            self.program = {p: d for p, d in self.program.items() if os.path.exists("/proc/%d" % p)}
        self.program[pid] = ex.argv

    # -- the listener and ptrace plumbing --

    def respond(self, held, error=0, flags=0):
        """Answer a held exec: go on (NOTIF_FLAG_CONTINUE) or fail with -error."""
        try:
            fcntl.ioctl(self.listener, NOTIF_SEND, struct.pack(RESP_FORMAT, held, 0, -error, flags))
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: the process is gone, or the exec abandoned
                raise

    def valid(self, held):
        try:
            fcntl.ioctl(self.listener, NOTIF_ID_VALID, struct.pack("<Q", held))
        except OSError:
            return False
        return True

    @staticmethod
    def cont(tid, sig=0):
        try:
            ptrace(PTRACE_CONT, tid, 0, sig)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise

    def untrace(self, tid):
        """Forget a tracee of this thread (let go, or gone)."""
        self.here.mine.discard(tid)
        with self.lock:
            if self.traced.get(tid) is self.here.mine:
                del self.traced[tid]

    def detach(self, tid):
        self.untrace(tid)
        try:
            ptrace(PTRACE_DETACH, tid, 0, 0)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise

    @staticmethod
    def say(line):
        try:
            os.write(2, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    def receive(self, buf):
        """The next held exec (id, tid, nr, args, facts, hit), waiting for it; None when it left
        first, False when none can come any more.
        The caller holds `receiving`. It polls first: the kernel may count requests that are
        gone, and a receive would then return at once with nothing (ENOENT); poll looks at
        the requests themselves."""
        for _fd, events in self.poller.poll():
            if not events & select.POLLIN:
                return False  # no process holds the filter any more: nothing comes again
        buf[:] = bytes(NOTIF_SIZE)  # the kernel wants it zeroed
        try:
            fcntl.ioctl(self.listener, NOTIF_RECV, buf, True)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINTR):
                return None  # the process left before its exec was read
            raise
        held, tid, _flags, nr, _arch, _ip, *args = struct.unpack(NOTIF_FORMAT, buf)
        return held, tid, nr, args, None, None

    def receive_fast(self, out, facts):
        """receive, by the compiled path, which lets go itself what its cache allows: a miss
        (id, tid, nr, args, facts: what it read, or None; whether no argument leads through a
        link), an event of this thread's tracees (code, pid, status, the tid that exec'd), or
        with a log a hit it let go (tid, its facts, its rule's token)."""
        flags = CX_TELL if self.log is not None else 0
        code = self.fast.cx_receive(self.listener, ctypes.byref(out), ctypes.byref(facts), flags)
        if code == CX_GONE:
            return False
        if code == CX_NONE:
            return None
        if code < 0:
            raise OSError(-code, os.strerror(-code))
        if code in (CX_EVENT, CX_EXPECTED, CX_FRESH):
            return code, out.pid, out.nr, out.token
        found = ctypes.string_at(facts, out.facts_len) if out.facts_len else None
        if code == CX_HIT:
            return out.pid, found, out.token
        return out.id, out.pid, out.nr, list(out.args), found, bool(out.no_links)

    def told(self, tid, facts, token):
        """A hit the compiled path let go, for the log."""
        ex = exec_from_facts(tid, facts)
        rules = self.rule_names
        rule = rules[token] if 0 <= token < len(rules) else "rules"
        self.record(ex, ALLOW, rule, "policy", cached=True)

    def on_notification(self, held, tid, nr, args, facts=None, hit=None):
        """A held exec; `facts` read by the compiled path, and `hit` whether it found no
        argument leading through a link."""
        if nr not in (NR_EXECVE, NR_EXECVEAT):
            self.respond(held, errno.EPERM)
            return
        try:
            if facts:
                ex = exec_from_facts(tid, facts)
                ex.no_links = hit is True
            else:
                ex = read_held_exec(tid, nr, args)
        except OSError as exc:
            if exc.errno in (errno.ESRCH, errno.ENOENT):
                self.respond(held, errno.ESRCH)
                return
            if exc.errno == errno.EFAULT:
                self.respond(held, errno.EFAULT)  # a bad address: the kernel's own answer
                return
            # What cannot be read cannot be judged (a process that made itself undumpable):
            # the exec fails.
            self.say("cairn: denied an exec of pid %d: cannot read it (%s)" % (tid, exc))
            self.respond(held, errno.EPERM)
            return
        if not facts and not self.valid(held):
            return  # gone while being read: what was read may be another process's
        try:
            st = os.stat(ex.opened)
        except OSError as exc:
            # The kernel would refuse it the same way: execvp walking PATH is not a question.
            self.respond(held, exc.errno or errno.ENOENT)
            return
        if not stat.S_ISREG(st.st_mode) or not os.access(ex.opened, os.X_OK):
            self.respond(held, errno.EACCES)
            return
        ex.ident = (st.st_dev, st.st_ino)
        ex.st = st
        ex.interpreter = shebang(ex.opened, st)
        refused = self.refused.get(tid)
        waiting = self.waiting.get(tid)
        key = ex.key() if refused is not None or waiting is not None else None
        if refused is not None and refused == (key, started(tid)):
            # The same program again (a shell trying the next PATH folder that leads to it):
            # one question, one answer.
            self.respond(held, errno.EPERM)
            return
        with self.lock:
            waiting = self.waiting.get(tid) if key is not None else None
            if waiting is not None and waiting[3] is not None and waiting[2].key() == key:
                # The same exec held again after its first hold was interrupted: one question
                # (the worker waiting for its answer answers this hold).
                waiting[3] = held
                return
        self.judge(tid, ex, held)

    def loaded_as_expected(self, pid, former):
        """The compiled path found at pid's exec event the image judged for `former` (the tid
        that exec'd) and let it go: what on_exec does then, without the comparing."""
        if former != pid:
            self.untrace(former)
        with self.lock:
            judged = self.pending.pop(former, None)
            if former != pid:
                self.pending.pop(pid, None)
        if self.refused.pop(former, None) is not None:
            self.claim(former)
        if judged is not None:
            self.remember(pid, judged)
        self.untrace(pid)

    def on_exec(self, pid):
        try:
            former = ctypes.c_ulong()
            ptrace(PTRACE_GETEVENTMSG, pid, 0, ctypes.addressof(former))
            if former.value != pid:
                # A thread that was not the leader exec'd: it has the leader's pid now.
                self.untrace(former.value)
                with self.lock:
                    self.traced[pid] = self.here.mine
                self.here.mine.add(pid)
            judged = self.pending.pop(former.value, None)
            if self.refused.pop(former.value, None) is not None:
                self.claim(former.value)
            if former.value != pid:
                self.pending.pop(pid, None)
            if judged is not None and loaded_as_judged(pid, judged, self.fast):
                self.remember(pid, judged)
                self.detach(pid)
                return
            if isinstance(judged, Judged):
                # Allowed by the compiled path's cache for bytes the kernel did not copy: what
                # did load is judged afresh, as for an exec nothing judged.
                judged = None
            loaded = read_exec_event(pid, judged is None)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return
            self.say("cairn: killed pid %d: its new program cannot be read (%s)" % (pid, exc))
            os.kill(pid, signal.SIGKILL)  # waited for in follow, as above
            return
        if judged is not None and same_exec(judged, loaded):
            self.remember(pid, judged)
            self.detach(pid)
            return
        if judged is not None:
            loaded = read_exec_event(pid, True)
        # Not what was judged (rewritten in between): judged again, held at the exec event.
        self.judge(pid, loaded, None)

    def on_event(self, code, pid, status, former):
        """An event of this thread's tracees the compiled path handed over (cx_follow,
        cx_receive): as it came, an exec that loaded as expected (detached there), or an exec
        event of a process it let go whose image differs (this thread's tracee now, judged
        afresh)."""
        if code == CX_EXPECTED:
            self.loaded_as_expected(pid, former)
            return
        if code == CX_FRESH:
            with self.lock:
                self.traced[pid] = self.here.mine
                self.pending.pop(former, None)
                self.pending.pop(pid, None)
            self.here.mine.add(pid)
            try:
                self.on_exec(pid)
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
            return
        try:
            self.step(pid, status)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise

    def tree(self):
        """The processes of the supervised tree, from /proc (the supervisor is their subreaper,
        so nothing leaves it by losing its parent)."""
        children = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
        found, todo = [], [os.getpid()]
        while todo:
            for child in children.get(todo.pop(), ()):
                found.append(child)
                todo.append(child)
        return found

    def forward(self, signum, _frame):
        """A signal to the supervisor goes to the whole supervised tree (not to the reaper,
        which ends when the command does)."""
        for pid in self.tree():
            if pid != self.reaper:
                try:
                    os.kill(pid, signum)
                except OSError:
                    pass

    def step(self, pid, status):
        """One event of a tracee of this thread."""
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            self.untrace(pid)
            self.pending.pop(pid, None)
            if self.refused.pop(pid, None) is not None:
                self.claim(pid)
            self.program.pop(pid, None)
            return
        if not os.WIFSTOPPED(status):
            return
        sig = os.WSTOPSIG(status)
        event = status >> 16
        if event == EVENT_EXEC:
            self.on_exec(pid)
        elif event == EVENT_STOP:
            try:
                ptrace(PTRACE_LISTEN, pid, 0, 0)  # group-stop: stay stopped until SIGCONT
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise
        elif sig == signal.SIGTRAP and event:
            self.cont(pid)
        else:
            self.cont(pid, sig)  # a signal for the traced process: deliver it

    def follow(self):
        """Wait for the events of this thread's tracees until none is left (each is let go at
        its exec event), the compiled path's own included. __WNOTHREAD: another worker's
        tracees are that worker's."""
        mine = self.here.mine
        if self.fast is not None:
            found = (ctypes.c_int * 3)()
            at = ctypes.addressof(found)
            where = (at, at + 4, at + 8)
        while mine or (self.fast is not None and self.fast.cx_owned()):
            try:
                if self.fast is None:
                    code, (pid, status), former = CX_EVENT, os.waitpid(-1, WALL | WNOTHREAD), 0
                else:
                    code = self.fast.cx_follow(*where)
                    if code < 0:
                        raise OSError(-code, os.strerror(-code))
                    pid, status, former = found
            except ChildProcessError:
                for tid in list(mine):
                    self.untrace(tid)
                return
            except OSError as exc:
                if exc.errno != errno.ECHILD:
                    raise
                for tid in list(mine):
                    self.untrace(tid)
                return
            self.on_event(code, pid, status, former)

    def hand_over(self):
        """Let the next worker take the listener. The one that received an exec keeps it until
        the exec is answered (the judging is Python, one thread at a time anyway), and hands
        it over before it waits: for the exec event, or for a person's answer."""
        if getattr(self.here, "receiving", False):
            self.here.receiving = False
            self.receiving.release()

    def spare(self):
        """Start one more worker when none is left waiting on the listener (one waits for an
        answer, or traces a process whose exec failed before its exec event)."""
        with self.lock:
            if self.idle > 0 or self.workers >= MAX_WORKERS:
                return
            self.workers += 1
            self.idle += 1
        threading.Thread(target=self.work, daemon=True).start()

    def receive_all(self, out, facts):
        """With the compiled path seeing hits through: keep the listener, and see to every
        miss and every event of this thread's tracees it hands over, until this thread must
        wait elsewhere (a person's answer: it hands the listener over first). False when the
        tree is gone."""
        while self.here.receiving:
            got = self.receive_fast(out, facts)
            if got is False:
                return False
            if got is None:
                continue
            if len(got) == 4:
                self.on_event(*got)
                continue
            if len(got) == 3:
                self.told(*got)
                continue
            # A miss judged here: the next worker takes the listener while this one waits for
            # that exec's event (and its other tracees') in follow, so no exec event waits for
            # the judging of another exec.
            self.on_notification(*got)
            return True
        return True

    def work(self):
        """A worker: take a held exec from the listener and see it through, from the hold to
        its exec event (ptrace requests must come from the tracing thread). Workers share the
        one listener; each held exec goes to one of them."""
        # Signals for the supervisor are the main thread's to forward: blocked here, so the
        # kernel delivers them there.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        self.here.mine = set()
        buf = bytearray(NOTIF_SIZE)
        out, facts = CxOut(), ctypes.POINTER(ctypes.c_ubyte)()
        try:
            while True:
                self.receiving.acquire()
                self.here.receiving = True
                try:
                    if self.fast is not None:
                        with self.lock:
                            self.idle -= 1
                        if self.idle <= 0:
                            self.spare()
                        if not self.receive_all(out, facts):
                            return  # the tree is gone (the next worker sees the same at once)
                    else:
                        got = self.receive(buf)
                        with self.lock:
                            self.idle -= 1
                        if got is False:
                            return  # the tree is gone (the next worker sees the same at once)
                        if self.idle <= 0:
                            self.spare()
                        if got is not None:
                            self.on_notification(*got)
                finally:
                    self.hand_over()
                self.follow()
                with self.lock:
                    if self.idle >= SPARE_WORKERS and self.workers > WORKERS:
                        self.workers -= 1
                        return  # more workers than needed wait already
                    self.idle += 1
        except BaseException as exc:  # noqa: BLE001 - a worker that fails ends the run
            self.say("cairn: the supervisor failed, the command is stopped: %r" % (exc,))
            self.status = UNSUPERVISED_EXIT
            try:
                os.kill(self.reaper, signal.SIGKILL)
            except OSError:
                pass

    def loop(self):
        """Start the workers and wait for the reaper, which ends with the command."""
        self.poller = select.poll()
        self.poller.register(self.listener, select.POLLIN)
        self.workers = self.idle = WORKERS
        if self.fast is not None:
            # The receiving worker reads its tracees' SIGCHLD from a descriptor (exec-fast.c):
            # blocked in every thread, so none takes it first.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        for _ in range(WORKERS):
            threading.Thread(target=self.work, daemon=True).start()
        status = None
        while True:
            try:
                pid, code = os.waitpid(-1, WALL | WNOTHREAD)
            except ChildProcessError:
                break
            if pid == self.reaper:
                status = os.WEXITSTATUS(code) if os.WIFEXITED(code) else 128 + os.WTERMSIG(code)
                break
        # Whatever the command left running ends with it, as it always has.
        for pid in self.tree():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG | WALL | WNOTHREAD)[0]:
                pass
        except ChildProcessError:
            pass
        if self.status is not None:
            return self.status
        return status if status is not None else 0


def resolve_command(argv, environ):
    name = argv[0]
    if "/" in name:
        return name
    for folder in (environ.get("PATH") or os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def receive_fd(sock):
    """A file descriptor sent over a Unix socket (SCM_RIGHTS), or the sender's error text."""
    size = struct.calcsize("i")
    data, ancillary, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(size))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS and len(payload) >= size:
            return struct.unpack("i", payload[:size])[0], ""
    return None, data.decode("utf-8", "replace").strip() or "the first process died"


def start(argv, supervisor):
    """Fork the reaper, which forks the command's first process; that one installs the filter,
    hands its notification listener over and execs the command (the first exec held and judged
    like any other). The reaper is the tree's parent and subreaper, a process of its own: a
    parent in the supervisor's own thread group would be shown its children's exec events,
    which are the tracing worker's."""
    check_arch()
    libc()
    program = resolve_command(argv, os.environ)
    if program is None:
        sys.stderr.write("cairn: %s: command not found\n" % argv[0])
        return NOT_FOUND_EXIT
    # Orphans of the tree become the reaper's children, and the supervisor's if the reaper is
    # gone: they stay its descendants, which a restricted ptrace (Yama) needs.
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    reaper = os.fork()
    if reaper == 0:
        ours.close()
        try:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            # The supervisor forwards these to the tree; a terminal's reach the command itself.
            for signum in FORWARDED:
                signal.signal(signum, signal.SIG_IGN)
            pid = os.fork()
            if pid == 0:
                first_process(program, argv, theirs)
            theirs.close()
            reap_until(pid)
        finally:
            os._exit(UNSUPERVISED_EXIT)
    theirs.close()
    supervisor.reaper = reaper
    try:
        listener, why = receive_fd(ours)
    except OSError as exc:
        listener, why = None, str(exc)
    if listener is None:
        ours.close()
        os.kill(reaper, signal.SIGKILL)
        os.waitpid(reaper, WALL)
        raise SetupError("cannot install the exec filter (%s)" % why)
    try:  # Linux 6.6 and newer
        fcntl.ioctl(listener, NOTIF_SET_FLAGS, FD_SYNC_WAKE_UP)
    except OSError:
        pass
    supervisor.listener = listener
    ours.sendall(b"g")
    ours.close()
    for signum in FORWARDED:
        signal.signal(signum, supervisor.forward)
    return supervisor.loop()


def first_process(program, argv, theirs):
    """The command's first process: install the filter, hand the listener over, exec."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        prctl(PR_SET_DUMPABLE, 1)  # readable by the supervisor (which itself is not)
        for signum in (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)  # python3 ignores the last two; exec keeps that
        listener = install_filter()
        theirs.sendmsg([b"l"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", listener))])
        os.close(listener)
        if theirs.recv(1) != b"g":
            os._exit(UNSUPERVISED_EXIT)
        theirs.close()
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the parent
        try:
            theirs.sendall(("%s\n" % exc).encode("utf-8", "replace"))
        finally:
            os._exit(UNSUPERVISED_EXIT)
    code = NOT_FOUND_EXIT
    try:
        os.execv(program, argv)
    except OSError as exc:
        os.write(2, ("cairn: cannot run %s: %s\n" % (argv[0], exc.strerror)).encode())
        code = NOT_FOUND_EXIT if exc.errno == errno.ENOENT else 126
    os._exit(code)


def reap_until(top):
    """The reaper: reap the tree's orphans; end with the command's exit status (128+N when
    signal N ended it)."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(UNSUPERVISED_EXIT)
        if pid == top:
            if os.WIFEXITED(status):
                os._exit(os.WEXITSTATUS(status))
            os._exit(128 + os.WTERMSIG(status))


def check(fast=None):
    """Set up supervision of `true` and see it judged: exit 0 when this sandbox allows it."""
    seen = []

    class Always:
        def decide(self, ex):
            seen.append(ex.program)
            return ALLOW, "check"

    sup = Supervisor(Always(), fast=fast)
    status = start(["true"], sup)
    if status != 0 or not seen:
        raise SetupError("a supervised `true` did not run as expected")
    sys.stdout.write("ok\n")
    return 0


USAGE = (
    "usage: supervisor.py [--policy FILE] [--rules FILE] [--workspace DIR] [--judge] [--log FILE]"
    " [--script FILE] [--fast LIB | --no-fast] -- CMD [ARG...]\n"
    "       supervisor.py [--rules FILE] [--fast LIB | --no-fast] --check\n"
)


def fast_path(choice):
    """The compiled hot path to use: the image's unless told (`--fast LIB`, or None for
    `--no-fast`); without it (not built, another machine) everything runs here, the same."""
    if choice is None:
        return None
    if choice == "" and not os.path.exists(FAST_LIBRARY):
        return None
    lib, why = load_fast(choice or FAST_LIBRARY)
    if lib is None:
        sys.stderr.write(
            "cairn: the compiled exec path cannot be used, judging in python: %s\n" % why
        )
    return lib


def main(argv):
    policy_file = log_file = script = rules_file = workspace = None
    use_judge = False
    fast = ""  # the image's library when it has one
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in ("--policy", "--log", "--script", "--rules", "--workspace", "--fast") and (
            i + 1 < len(argv)
        ):
            value = argv[i + 1]
            if arg == "--fast":
                fast = value
            elif arg == "--policy":
                policy_file = value
            elif arg == "--workspace":
                workspace = value
            elif arg == "--log":
                log_file = value
            elif arg == "--rules":
                rules_file = value
            else:
                script = value
            i += 2
            continue
        if arg == "--judge":
            use_judge = True
            i += 1
            continue
        if arg == "--no-fast":
            fast = None
            i += 1
            continue
        if arg == "--check" and i == len(argv) - 1:
            try:
                if rules_file:
                    load_rules(rules_file)
                return check(fast_path(fast))
            except (SetupError, OSError) as exc:
                sys.stderr.write("cairn: supervision is unavailable: %s\n" % exc)
                return UNSUPERVISED_EXIT
        if arg.startswith("-"):
            sys.stderr.write(USAGE)
            return 2
        break
    command = argv[i:]
    if not command:
        sys.stderr.write(USAGE)
        return 2
    try:
        if policy_file:
            policy = Policy.load(policy_file)
        else:
            policy = Policy({"default": ASK if use_judge else ALLOW})
        mailbox = Mailbox(os.environ) if use_judge else None
        rules = load_rules(rules_file) if rules_file else None
        log = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115 - for the whole run
        # Other processes of the sandbox's user must not read or write this one's memory.
        prctl(PR_SET_DUMPABLE, 0)
        supervisor = Supervisor(policy, mailbox, log, script, rules, workspace, fast_path(fast))
        return start(command, supervisor)
    except (SetupError, OSError, ValueError) as exc:
        sys.stderr.write("cairn: supervision is unavailable, the command did not start: %s\n" % exc)
        return UNSUPERVISED_EXIT


def leave(code):
    """End the process with the command's exit status, without the interpreter's teardown.
    The workers are daemon threads, and one may be starting a spare worker just as the command
    ends: a thread that starts while the interpreter is torn down crashes it (SIGSEGV in the new
    thread's start, seen about once in 250 runs), which turned a command that ended well into
    exit status 139. Everything written is flushed first; nothing else is left to tear down."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
