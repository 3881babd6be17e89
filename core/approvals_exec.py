"""Program-level approval rules: what one program start (an execve seen by the in-sandbox
supervisor, resources/sandbox/supervisor.py) really runs, and which rule family it falls in.

Owns normalising an exec (wrapper prefixes such as `env`/`nice`/`timeout`/`xargs`/`find -exec`,
git's global options, `-c` and `GIT_CONFIG_*` settings, aliases and dashed helpers) and
classifying it (force push, deletion outside the workspace, credential reads, privilege
escalation, publishing, an interpreter reading its program from a pipe). The supervisor only
collects facts and asks; the judge (core/approvals.py) owns the mailbox, rows and decisions.
Pure functions, no I/O: git configuration arrives as text in the request.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

ALLOW = "allow"
ASK = "ask"
DENY = "deny"

WORKSPACE = "/workspace"
WRITABLE_ROOTS = ("/workspace", "/tmp")
DEFAULT_HOME = "/home/agent"


@dataclass(frozen=True)
class ExecFacts:
    """One program start as the supervisor saw it, before it ran."""

    program: str  # the resolved executable
    argv: tuple[str, ...]
    cwd: str = WORKSPACE
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: str = "null"  # pipe, socket, tty, file, null, closed
    git_config: Mapping[str, str] = field(default_factory=dict)  # path -> text
    pid: int = 0
    parents: tuple[str, ...] = ()
    script_line: int | None = None
    # The image's programs this one is a copy of (same ELF build id), when it lies outside the
    # image's folders: `cp /usr/bin/git ./tig; ./tig push` is judged as git.
    same_as: tuple[str, ...] = ()
    stdin_path: str = ""  # the file stdin reads, when it is one (`cat < FILE`)
    # Arguments that lead elsewhere through symbolic links: word -> (the file it names, the
    # word with only its folders resolved). `ln -s ~/x link; rm -rf link/` deletes in the home.
    links: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Where the run's workspace is as its programs see it: /workspace in a container; the
    # folder itself when the sandbox is the host (the host backend). Set by the supervisor's
    # launch, not by the run.
    workspace: str = WORKSPACE

    @property
    def writable_roots(self) -> tuple[str, ...]:
        """Where deleting takes nothing that is not recorded or scratch."""
        return (self.workspace, "/tmp") if self.workspace != WORKSPACE else WRITABLE_ROOTS

    @property
    def home(self) -> str:
        return self.env.get("HOME") or DEFAULT_HOME

    @classmethod
    def from_request(cls, doc: Mapping[str, Any]) -> ExecFacts:
        """The facts of a supervisor's request (its JSON document); BadFacts when unusable."""
        argv = doc.get("argv")
        program = doc.get("program")
        if not isinstance(program, str) or not isinstance(argv, list):
            raise BadFacts("program and argv are required")
        if not all(isinstance(a, str) for a in argv):
            raise BadFacts("argv must be strings")
        env = doc.get("env") or {}
        config = doc.get("git_config") or {}
        if not isinstance(env, dict) or not isinstance(config, dict):
            raise BadFacts("env and git_config must be objects")
        line = doc.get("script_line")
        number = line.get("number") if isinstance(line, dict) else None
        parents = doc.get("parents") or []
        copies = doc.get("same_as") or []
        if not isinstance(copies, list):
            raise BadFacts("same_as must be a list")
        return cls(
            program=program,
            argv=tuple(argv),
            cwd=str(doc.get("cwd") or WORKSPACE),
            env={str(k): str(v) for k, v in env.items()},
            stdin=str(doc.get("stdin") or "null"),
            stdin_path=str(doc.get("stdin_path") or ""),
            links=_links_of(doc.get("links")),
            git_config={str(k): str(v) for k, v in config.items()},
            pid=int(doc.get("pid") or 0),
            parents=tuple(str(p.get("program", "")) for p in parents if isinstance(p, dict)),
            script_line=number if isinstance(number, int) else None,
            same_as=tuple(str(p) for p in copies if isinstance(p, str) and p.startswith("/")),
            workspace=_workspace_of(doc.get("workspace")),
        )


def _links_of(raw: Any) -> dict[str, tuple[str, str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadFacts("links must be an object")
    out = {}
    for word, pair in raw.items():
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair):
            out[str(word)] = (pair[0], pair[1])
    return out


def _workspace_of(value: object) -> str:
    """An absolute, normal folder other than the root; /workspace otherwise."""
    if value == WORKSPACE:
        return WORKSPACE
    if not isinstance(value, str) or value == "/" or not value.startswith("/"):
        return WORKSPACE
    return value if posixpath.normpath(value) == value else WORKSPACE


class BadFacts(ValueError):
    """A request whose facts cannot be judged."""


@dataclass(frozen=True)
class Invocation:
    """A program and its arguments as rules match them: `name` is the command's identity
    (`git`, `rm`, `sh`), `args` what follows it, `cwd` where relative paths point."""

    name: str
    args: tuple[str, ...]
    cwd: str
    via: str = ""  # the wrapper that starts it (`env`, `xargs`, `find -exec`), "" when direct
    args_from_stdin: bool = False  # xargs: more arguments come from its input
    stdin_marker: str = ""  # xargs -I/-i: the word replaced by what its input holds
    # What the rules work out from this invocation and one exec's facts (its paths, git's
    # parse), kept for the other rules of the same classification: name -> (facts, value).
    memo: dict[str, tuple[ExecFacts, Any]] = field(default_factory=dict, compare=False, repr=False)

    def text(self) -> str:
        return shlex.join([self.name, *self.args])


@dataclass(frozen=True)
class GitCommand:
    subcommand: str  # after aliases; "!..." for a shell alias; "" when none
    args: tuple[str, ...]
    config: Mapping[str, str]  # lower-cased section.key (subsection kept) -> last value
    cwd: str
    alias_chain: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExecVerdict:
    action: str  # allow, ask, deny
    rule: str | None = None
    reason: str = ""
    what: str = ""  # the normalised command the rule matched

    @property
    def needs_approval(self) -> bool:
        return self.action != ALLOW


# -- names -----------------------------------------------------------------------------------------

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh", "yash"})
_VERSIONED = re.compile(r"^(python|pypy|perl|ruby|php|lua|tclsh)[0-9.]*$")
MULTICALL = frozenset({"busybox", "toybox"})


def _basename(path: str) -> str:
    """posixpath.basename of a str (what follows the last slash), without its generic dispatch."""
    return path[path.rfind("/") + 1 :]


def command_name(path_or_name: str) -> str:
    """`/usr/bin/python3.11` -> `python3`'s family name `python`; `/bin/dash` -> `sh`."""
    base = _basename(path_or_name)
    if base in SHELLS:
        return "sh" if base in ("dash", "ash", "posh") else base
    m = _VERSIONED.match(base)
    if m:
        return "python" if m.group(1) == "pypy" else m.group(1)
    if base in ("nodejs",):
        return "node"
    return base


def identity_of(facts: ExecFacts) -> tuple[str, tuple[str, ...]]:
    """The command name and arguments, minding multi-call binaries and git's dashed helpers,
    which act on argv[0] (`/usr/lib/git-core/git-push` is `git push`)."""
    argv0 = _basename(facts.argv[0]) if facts.argv else ""
    real = _basename(facts.program)
    args = tuple(facts.argv[1:])
    if real in MULTICALL and argv0 and argv0 not in MULTICALL:
        return command_name(argv0), args
    if real in MULTICALL and args:
        return command_name(args[0]), args[1:]
    if real == "git" or argv0.startswith("git-") or real.startswith("git-"):
        for name in (argv0, real):
            if name.startswith("git-") and name not in ("git-shell",):
                return "git", (name[4:], *args)
        return "git", args
    return command_name(facts.program), args


# -- wrappers --------------------------------------------------------------------------------------

# (options taking a value, long options taking a value when not written with '=')
_WRAPPER_VALUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "env": ("uCS", ("--unset", "--chdir", "--split-string", "--argv0")),
    "nice": ("n", ("--adjustment",)),
    "timeout": ("sk", ("--signal", "--kill-after")),
    "stdbuf": ("ioe", ("--input", "--output", "--error")),
    "nohup": ("", ()),
    "setsid": ("", ()),
    "ionice": ("cnp", ("--class", "--classdata", "--pid")),
    "chrt": ("", ()),
    "time": ("fo", ("--format", "--output")),
    "command": ("", ()),
    "exec": ("a", ()),
    # (-e, -i and -l take a value only when it is attached)
    "xargs": ("adEILnPs", ("--arg-file", "--delimiter", "--max-args", "--max-procs")),
    "sudo": ("CDghpRTUu", ("--user", "--group", "--chdir", "--prompt", "--host")),
    "doas": ("Cu", ()),
    "flock": ("wEc", ("--timeout", "--conflict-exit-code", "--command")),
    "unshare": ("", ()),
    "chroot": ("", ()),
    "watch": ("nd", ("--interval",)),
}
WRAPPERS = frozenset(_WRAPPER_VALUES)


def _after_options(name: str, args: Sequence[str]) -> tuple[int, str | None, list[str]]:
    """Where a wrapper's command starts in `args`; also env's `-C DIR` and `-S STRING`."""
    short_values, long_values = _WRAPPER_VALUES[name]
    chdir: str | None = None
    split: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return i + 1, chdir, split
        if name == "env" and "=" in arg and not arg.startswith("-"):
            i += 1  # NAME=value
            continue
        if arg.startswith("--") and len(arg) > 2:
            key, eq, value = arg.partition("=")
            if key in long_values and not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            if name == "env" and key == "--chdir":
                chdir = value
            if name == "env" and key == "--split-string":
                split = shlex.split(value)
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1 and not (name == "nice" and arg[1:].isdigit()):
            letters = arg[1:]
            for j, letter in enumerate(letters):
                if letter in short_values:
                    value = letters[j + 1 :]
                    if not value:
                        value = args[i + 1] if i + 1 < len(args) else ""
                        i += 1
                    if name == "env" and letter == "C":
                        chdir = value
                    if name == "env" and letter == "S":
                        split = shlex.split(value)
                    break
            i += 1
            continue
        if name == "nice" and re.match(r"^-\d+$", arg):
            i += 1
            continue
        if name in ("timeout",):
            return i + 1, chdir, split  # the duration
        if name == "chrt" and arg.isdigit():
            return i + 1, chdir, split
        if name == "flock":
            return i + 1, chdir, split  # the lock file
        if name == "chroot":
            return i + 1, chdir, split  # the new root
        return i, chdir, split
    return i, chdir, split


def _find_execs(args: Sequence[str], cwd: str) -> list[Invocation]:
    """The commands `find ... -exec CMD {} ;` (and -execdir, -ok, -okdir) would start."""
    found = []
    starts = []
    for arg in args:
        if arg.startswith(("-", "(", "!")) and arg != "-":
            break
        starts.append(arg)
    starts = starts or ["."]
    i = 0
    while i < len(args):
        if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            command: list[str] = []
            for word in args[i + 1 : j]:
                # `{}` is each file found: under the start points (a deletion there is judged).
                command.extend(starts if word == "{}" else [word])
            if command:
                found.append(
                    Invocation(command_name(command[0]), tuple(command[1:]), cwd, via="find -exec")
                )
            i = j
        i += 1
    return found


def _xargs_marker(args: Sequence[str]) -> str:
    """The replace string of `xargs -I STR` / `-iSTR` / `--replace[=STR]` (`{}` by default)."""
    for i, arg in enumerate(args):
        if arg == "-I" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("-I") and len(arg) > 2:
            return arg[2:]
        if arg.startswith("-i") and not arg.startswith("--"):
            return arg[2:] or "{}"
        if arg.startswith("--replace"):
            return arg.partition("=")[2] or "{}"
        if not arg.startswith("-"):
            break
    return ""


def unwrap(facts: ExecFacts) -> list[Invocation]:
    """Every program this exec starts or stands for, outermost first: `env X=1 nice git push` is
    env, nice and git; `find / -exec rm {} ;` is find and rm. Each is judged."""
    name, args = identity_of(facts)
    chain = [Invocation(name, args, facts.cwd)]
    cwd = facts.cwd
    seen = 0
    while chain[-1].name in WRAPPERS and seen < 16:
        seen += 1
        outer = chain[-1]
        start, chdir, split = _after_options(outer.name, outer.args)
        if chdir:
            cwd = posixpath.normpath(posixpath.join(cwd, chdir))
        rest = [*split, *outer.args[start:]]
        if not rest:
            break
        inner_name = command_name(rest[0])
        inner_args = tuple(rest[1:])
        if inner_name == "git" or posixpath.basename(rest[0]).startswith("git-"):
            base = posixpath.basename(rest[0])
            if base.startswith("git-"):
                inner_args = (base[4:], *inner_args)
                inner_name = "git"
        chain.append(
            Invocation(
                inner_name,
                inner_args,
                cwd,
                via=outer.name,
                args_from_stdin=outer.name == "xargs",
                stdin_marker=_xargs_marker(outer.args) if outer.name == "xargs" else "",
            )
        )
    for inv in list(chain):
        if inv.name == "find":
            chain.extend(_find_execs(inv.args, inv.cwd))
    return chain


# -- git -------------------------------------------------------------------------------------------

_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_ENTRY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")


def _config_value(raw: str) -> str:
    out = []
    quoted = False
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == '"':
            quoted = not quoted
        elif c == "\\" and i + 1 < len(raw):
            i += 1
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(raw[i], raw[i]))
        elif c in "#;" and not quoted:
            break
        else:
            out.append(c)
        i += 1
    return "".join(out).strip()


def config_key(key: str) -> str:
    """git's key identity: section and name case-insensitive, a subsection kept as written."""
    section, _, rest = key.partition(".")
    if "." in rest:
        sub, _, name = rest.rpartition(".")
        return f"{section.lower()}.{sub}.{name.lower()}"
    return f"{section.lower()}.{rest.lower()}"


def parse_git_config(text: str) -> dict[str, str]:
    """`[section "sub"] key = value` lines as {section.sub.key: value} (last one wins)."""
    out: dict[str, str] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m:
            name, sub, rest = m.group(1), m.group(2), m.group(3)
            section = name.lower() + (f".{sub}" if sub is not None else "")
            if "." in name and sub is None:  # [section.sub] (deprecated form)
                head, _, tail = name.partition(".")
                section = f"{head.lower()}.{tail.lower()}"
            line = rest.strip()
            if not line:
                continue
        e = _ENTRY.match(line)
        if e and section:
            value = "true" if e.group(2) is None else _config_value(e.group(2))
            out[f"{section}.{e.group(1).lower()}"] = value
    return out


def _env_config(env: Mapping[str, str]) -> dict[str, str]:
    """Settings from the environment: GIT_CONFIG_COUNT/KEY_n/VALUE_n and GIT_CONFIG_PARAMETERS."""
    out: dict[str, str] = {}
    params = env.get("GIT_CONFIG_PARAMETERS", "")
    if params:
        try:
            words = shlex.split(params)
        except ValueError:
            words = []
        for word in words:
            key, _, value = word.partition("=")
            if key:
                out[config_key(key)] = value
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0
    for n in range(min(max(count, 0), 1000)):
        name = env.get(f"GIT_CONFIG_KEY_{n}")
        if name:
            out[config_key(name)] = env.get(f"GIT_CONFIG_VALUE_{n}", "")
    return out


GIT_VALUE_OPTIONS: tuple[str, ...] = (
    *("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"),
    *("--super-prefix", "--list-cmds", "--attr-source"),
)


def parse_git(facts: ExecFacts, args: Sequence[str], cwd: str | None = None) -> GitCommand:
    """git's global options, settings (files, environment, `-c`), and aliases resolved."""
    config: dict[str, str] = {}
    for _path, text in facts.git_config.items():
        config.update(parse_git_config(text))
    config.update(_env_config(facts.env))
    here = cwd or facts.cwd
    rest = list(args)
    i = 0
    while i < len(rest):
        arg = rest[i]
        if not arg.startswith("-") or arg == "-":
            break
        if arg == "--":
            i += 1
            break
        key, eq, value = arg.partition("=")
        if key in GIT_VALUE_OPTIONS:
            if not eq:
                value = rest[i + 1] if i + 1 < len(rest) else ""
                i += 1
            if key == "-C" and value:
                here = posixpath.normpath(posixpath.join(here, value))
            elif key == "-c":
                k, _, v = value.partition("=")
                config[config_key(k)] = v if "=" in value else "true"
            elif key == "--config-env":
                k, _, var = value.partition("=")
                config[config_key(k)] = facts.env.get(var, "")
        i += 1
    sub = rest[i] if i < len(rest) else ""
    sub_args = tuple(rest[i + 1 :])
    chain: list[str] = []
    # Alias names are keys, matched whatever their case (`-c alias.p=push P`).
    while sub and config_key(f"alias.{sub}") in config and len(chain) < 10 and sub not in chain:
        chain.append(sub)
        expansion = config[config_key(f"alias.{sub}")]
        if expansion.startswith("!"):
            return GitCommand(expansion, sub_args, config, here, tuple(chain))
        try:
            words = shlex.split(expansion)
        except ValueError:
            words = expansion.split()
        if not words:
            break
        # An alias may itself carry global options (`alias.p = -c x=y push`).
        inner = parse_git(
            ExecFacts(facts.program, ("git",), here, facts.env, facts.stdin, {}),
            [*words],
            here,
        )
        for k, v in inner.config.items():
            config.setdefault(k, v)
        sub, sub_args = inner.subcommand, (*inner.args, *sub_args)
        if inner.subcommand == words[0] and config_key(f"alias.{sub}") not in config:
            break
    return GitCommand(sub, sub_args, config, here, tuple(chain))


def _short_flags(args: Sequence[str]) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))


FORCE_OPTIONS = (
    *("--force", "--force-with-lease", "--force-if-includes", "--mirror", "--delete"),
    "--prune",
)


def is_force_push(git: GitCommand) -> bool:
    if git.subcommand != "push":
        return False
    for arg in git.args:
        name = arg.split("=", 1)[0]
        # git takes any unambiguous start of a long option (`--mirr`, `--delet`).
        if len(name) > 3 and any(f.startswith(name) for f in FORCE_OPTIONS):
            return True
        if not arg.startswith("-") and (arg.startswith("+") or ":+" in arg):
            return True
        if arg.startswith(":") and len(arg) > 1:
            return True  # `:branch` deletes it
    letters = _short_flags(git.args)
    return "f" in letters or "d" in letters


HOOK_KEYS = ("core.hookspath", "core.fsmonitor", "core.sshcommand")


CONFIG_READS = frozenset(
    {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool"}
    | {"--list", "-l", "--show-origin", "--show-scope"}
)


def _config_reads(args: Sequence[str]) -> bool:
    """`git config` only reading (`--get`, `--list`, `git config get|list`)."""
    words = [a for a in args if not a.startswith("-")]
    return any(a in CONFIG_READS for a in args) or (words[:1] in (["get"], ["list"]))


def _turns_off(key: str, value: str) -> bool:
    """A setting that runs nothing: hooks from /dev/null, no fsmonitor (tools such as agents run
    git this way to keep a repository's code from running)."""
    value = value.strip()
    if key == "core.hookspath":
        return value == "/dev/null"
    if key == "core.fsmonitor":
        return value.lower() in ("", "false", "no", "off", "0")
    return False


# The configuration files the run cannot write: Cairn's own (GIT_CONFIG_GLOBAL names it) and the
# workspace's, both read-only mounts. Every other source (`-c`, GIT_CONFIG_*, the home's files, a
# file GIT_CONFIG_GLOBAL is pointed at, a repository the run made) is the run's own choice.
TRUSTED_GIT_CONFIG = frozenset({"/cairn/git/config", "/workspace/.git/config"})
_INCLUDE_KEY = re.compile(r"^include(?:if\..*)?\.path$")


def git_hook_settings(git: GitCommand, facts: ExecFacts) -> list[str]:
    """Settings that make git run a program of the run's choosing (hooks path, fsmonitor, ssh
    command, templates, a file included from elsewhere): in effect for this command from a
    source the run controls, or written by it."""
    trusted: dict[str, str] = {}
    for path, text in facts.git_config.items():
        if path in TRUSTED_GIT_CONFIG:
            trusted.update(parse_git_config(text))
    found = [
        k
        for k in HOOK_KEYS
        if k in git.config and git.config[k] != trusted.get(k) and not _turns_off(k, git.config[k])
    ]
    # An included file can set any of these; what it holds is not read here.
    found += [k for k in git.config if _INCLUDE_KEY.match(k) and git.config[k] != trusted.get(k)][
        :1
    ]
    if git.subcommand == "config" and not _config_reads(git.args):
        found += [config_key(a) for a in git.args if config_key(a) in HOOK_KEYS][:1]
    if git.subcommand in ("init", "clone") and (
        "GIT_TEMPLATE_DIR" in facts.env
        or any(a == "--template" or a.startswith("--template=") for a in git.args)
    ):
        found.append("init.templatedir")
    return found


# -- paths -----------------------------------------------------------------------------------------


def resolve(path: str, cwd: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    # posixpath.join(cwd, path), written out for two strings
    if path[:1] == "/":
        joined = path
    elif not cwd or cwd[-1:] == "/":
        joined = cwd + path
    else:
        joined = cwd + "/" + path
    # Already normal (one leading slash, no empty, `.` or `..` part): normpath would return it.
    if joined[:1] == "/" and joined[-1:] != "/" and "//" not in joined and "/." not in joined:
        return joined
    return posixpath.normpath(joined)


def _operands(args: Sequence[str]) -> list[str]:
    out = []
    ended = False
    for arg in args:
        if not ended and arg == "--":
            ended = True
            continue
        if not ended and arg.startswith("-") and arg != "-":
            if "=" in arg:
                out.append(arg.split("=", 1)[1])
            continue
        out.append(arg)
    return out


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


CREDENTIAL_DIRS: tuple[str, ...] = (
    *(".ssh", ".aws", ".gnupg", ".kube", ".azure", ".docker", ".config/gh", ".config/gcloud"),
    *(".password-store",),
)
CREDENTIAL_FILES = frozenset(
    {".netrc", ".git-credentials", ".npmrc", ".pypirc", ".pgpass", ".my.cnf", ".vault-token"}
)
CREDENTIAL_NAMES = re.compile(
    r"^(?:id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?|.*\.pem|.*\.key|credentials(?:\.json)?|shadow)$"
)


_CREDENTIAL_ANYWHERE = re.compile("|".join(re.escape(f"/{f}/") for f in CREDENTIAL_DIRS))


@functools.lru_cache(maxsize=64)
def _credential_folders(home: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the credential folders under each home, as `DIR/` prefixes; `/NAME/` anywhere)."""
    targets = {posixpath.join(r, f) for f in CREDENTIAL_DIRS for r in (home, DEFAULT_HOME, "/root")}
    return tuple(t + "/" for t in sorted(targets)), tuple(f"/{f}/" for f in CREDENTIAL_DIRS)


def is_credential_path(path: str, home: str) -> bool:
    base = _basename(path)
    if base in CREDENTIAL_FILES or CREDENTIAL_NAMES.match(base):
        return True
    if path in ("/etc/shadow", "/etc/gshadow", "/etc/sudoers"):
        return True
    prefixes, _anywhere = _credential_folders(home)
    slashed = path + "/"
    return slashed.startswith(prefixes) or _CREDENTIAL_ANYWHERE.search(slashed) is not None


def program_text_index(name: str, args: Sequence[str]) -> int | None:
    """Where an interpreter's program text is among `args` (`sh -c TEXT`, `bash -lc TEXT`,
    `python3 -c TEXT`, `perl -eTEXT`, `node --eval TEXT`), or None. That text is code, not a
    path: what it runs is judged when it runs."""
    family = _interpreter_family(name)
    if family is None:
        return None
    short = _PROGRAM_OPTIONS.get(family, ("e",))
    with_value = _OPTIONS_WITH_VALUE.get(family, "")
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-", "--") or not arg.startswith(("-", "+")) or len(arg) < 2:
            return None
        if arg.startswith("--"):
            key, eq, _value = arg.partition("=")
            if key in _PROGRAM_LONG_OPTIONS:
                return i if eq else (i + 1 if i + 1 < len(args) else None)
            i += 1
            continue
        letters = arg[1:]
        for j, letter in enumerate(letters):
            if letter in short:
                if j < len(letters) - 1 and family != "sh":
                    return i  # `-eCODE`: the program is in this argument
                return i + 1 if i + 1 < len(args) else None
            if letter in with_value:
                if j == len(letters) - 1:
                    i += 1
                break
        i += 1
    return None


def _script_operand(name: str, args: Sequence[str]) -> str | None:
    """The file an interpreter reads its program from (`bash FILE`, `python3 FILE`), or None
    (program text in the arguments, or stdin)."""
    family = _interpreter_family(name)
    if family is None or program_text_index(name, args) is not None:
        return None
    with_value = _OPTIONS_WITH_VALUE.get(family, "")
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return args[i + 1] if i + 1 < len(args) and args[i + 1] != "-" else None
        if arg == "-":
            return None
        if arg.startswith("--") or (arg.startswith(("-", "+")) and len(arg) > 1):
            if not arg.startswith("--") and arg[-1] in with_value:
                i += 1
            i += 1
            continue
        return arg
    return None


# Files that are a descriptor of the process: `bash <(curl ...)` runs `bash /dev/fd/63`.
_DESCRIPTOR_PATH = re.compile(r"^/(?:dev/(?:fd/\d+|stdin)|proc/(?:self|thread-self|\d+)/fd/\d+)$")


def _not_code(inv: Invocation) -> list[str]:
    """The arguments, with an interpreter's program text left out."""
    args = list(inv.args)
    code = program_text_index(inv.name, args)
    if code is not None:
        args[code] = ""
    return args


def _path_args(
    inv: Invocation,
    home: str,
    links: Mapping[str, Sequence[str]] | None = None,
    *,
    last: bool = True,
) -> list[str]:
    """Operands and option values as paths; `@FILE` (curl's "read this file") included. An
    interpreter's program text (`sh -c TEXT`) is not a path. With `links` (the supervisor's
    ExecFacts.links), where a word leads through symbolic links too: the file itself (`last`,
    what a reader opens) or only through its folders (what `rm link` removes, unless `link/`)."""
    words = [a for a in _operands(_not_code(inv)) if a and a != "-"]
    words += [a[1:] for a in words if a.startswith("@") and len(a) > 1]
    paths = [resolve(a, inv.cwd, home) for a in words]
    for word in words:
        found = links.get(word) if links else None
        if found and len(found) == 2:
            paths.append(found[0] if last or word.endswith(("/", "/.")) else found[1])
    return paths


def _paths_of(inv: Invocation, facts: ExecFacts, *, last: bool = True) -> tuple[str, ...]:
    """_path_args with the exec's home and links, worked out once per invocation and facts."""
    name = "paths" if last else "paths-through-folders"
    found = inv.memo.get(name)
    if found is not None and found[0] is facts:
        return found[1]
    paths = tuple(_path_args(inv, facts.home, facts.links, last=last))
    inv.memo[name] = (facts, paths)
    return paths


# -- rule families ---------------------------------------------------------------------------------

DELETERS = frozenset({"rm", "rmdir", "unlink", "shred", "srm", "wipe"})
ESCALATORS = frozenset(
    {"sudo", "su", "doas", "pkexec", "runuser", "setpriv", "run0", "calife", "sg", "newgrp"}
)
PUBLISHERS: dict[str, tuple[str, ...]] = {
    "npm": ("publish",),
    "pnpm": ("publish",),
    "yarn": ("publish", "npm"),
    "bun": ("publish",),
    "cargo": ("publish",),
    "twine": ("upload",),
    "gem": ("push",),
    "poetry": ("publish",),
    "flit": ("publish",),
    "hatch": ("publish",),
    "uv": ("publish",),
    "pdm": ("publish",),
    "docker": ("push",),
    "podman": ("push",),
    "nuget": ("push",),
    "dotnet": ("nuget",),
    "gh": ("release",),
}
READERS_SAFE_FOR_CREDENTIALS = frozenset({"ls", "stat", "test", "[", "true", "false"})


def reads_program_from_stdin(name: str, argv: Sequence[str]) -> bool:
    """Whether an interpreter invoked as `argv` takes its program from stdin (`sh`, `bash -s`,
    `python3 -`, `perl`). Kept identical to the supervisor's own copy (a test compares them)."""
    family = _interpreter_family(name)
    if family is None:
        return False
    short = _PROGRAM_OPTIONS.get(family, ("e",))
    with_value = _OPTIONS_WITH_VALUE.get(family, "")
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-":
            return True
        if arg == "--":
            return i + 1 >= len(args) or args[i + 1] == "-"
        if arg.startswith("--"):
            if arg.split("=", 1)[0] in _PROGRAM_LONG_OPTIONS:
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
                        i += 1
                    break
            i += 1
            continue
        return False
    return True


_INTERPRETER_RE = re.compile(
    r"^(?:(?:ba|da|z|k|mk|a|po|y)?sh|python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node(?:js)?"
    r"|php[0-9.]*|lua[0-9.]*|tclsh[0-9.]*|R|Rscript|osascript)$"
)
_PROGRAM_OPTIONS = {"sh": ("c",), "python": ("c", "m"), "perl": ("e", "E"), "ruby": ("e",)}
_PROGRAM_LONG_OPTIONS = ("--eval", "--print", "--command")
_OPTIONS_WITH_VALUE = {"sh": "oO", "python": "WXQ", "perl": "IMmdx", "ruby": "IrCEFK"}


@functools.lru_cache(maxsize=512)
def _interpreter_family(name: str) -> str | None:
    if not _INTERPRETER_RE.match(name):
        return None
    if name.endswith("sh") and not name.startswith(("python", "pypy")):
        return "sh"
    for family in ("python", "pypy", "perl", "ruby", "node"):
        if name.startswith(family):
            return "python" if family == "pypy" else family
    return "other"


@dataclass(frozen=True)
class ExecRule:
    """One rule family: a predicate over an invocation (with the whole exec's facts)."""

    id: str
    action: str
    reason: str
    matches: Callable[[Invocation, ExecFacts], bool]


def _git(inv: Invocation, facts: ExecFacts) -> GitCommand | None:
    """git's command (parse_git), worked out once per invocation and facts."""
    if inv.name != "git":
        return None
    found = inv.memo.get("git")
    if found is not None and found[0] is facts:
        return found[1]
    git = parse_git(facts, inv.args, inv.cwd)
    inv.memo["git"] = (facts, git)
    return git


def _force_push(inv: Invocation, facts: ExecFacts) -> bool:
    git = _git(inv, facts)
    return git is not None and is_force_push(git)


def _push(inv: Invocation, facts: ExecFacts) -> bool:
    git = _git(inv, facts)
    return git is not None and git.subcommand in ("push", "send-pack")


def _git_hooks(inv: Invocation, facts: ExecFacts) -> bool:
    git = _git(inv, facts)
    return git is not None and bool(git_hook_settings(git, facts))


def _git_shell_alias(inv: Invocation, facts: ExecFacts) -> bool:
    git = _git(inv, facts)
    return git is not None and git.subcommand.startswith("!")


# Where a move takes nothing away that matters: the workspace (recorded), /tmp, and the run's
# own folder (the shell engine's script moves its step file there).
MOVABLE_ROOTS = (*WRITABLE_ROOTS, "/cairn/runs")


def _moved_away(inv: Invocation, home: str, roots: tuple[str, ...] = MOVABLE_ROOTS) -> list[str]:
    """What `mv` takes away from outside the workspace: every operand but the destination (`-t
    DIR` names it apart), unless it stays inside the home it came from."""
    target = None
    operands: list[str] = []
    ended = False
    i = 0
    while i < len(inv.args):
        arg = inv.args[i]
        if ended or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
        elif arg == "--":
            ended = True
        elif arg in ("-t", "--target-directory"):
            target = inv.args[i + 1] if i + 1 < len(inv.args) else ""
            i += 1
        elif arg.startswith("--target-directory="):
            target = arg.split("=", 1)[1]
        elif arg in ("-S", "--suffix"):
            i += 1
        i += 1
    if target is None:
        target = operands[-1] if operands else ""
        operands = operands[:-1]
    into = resolve(target, inv.cwd, home)
    sources = [resolve(a, inv.cwd, home) for a in operands if a]
    return [
        p
        for p in sources
        if not _under(p, roots) and not (_under(p, [home]) and p != home and _under(into, [home]))
    ]


def _rm_outside(inv: Invocation, facts: ExecFacts) -> bool:
    if inv.name == "mv" and not inv.args_from_stdin:
        # Moving a folder away deletes it from where it was.
        return bool(_moved_away(inv, facts.home, (*facts.writable_roots, "/cairn/runs")))
    if inv.name == "find" and "-delete" in inv.args:
        starts = [a for a in inv.args if not a.startswith(("-", "(", ")", "!"))][:1] or ["."]
        paths = [resolve(starts[0], inv.cwd, facts.home)]
        paths += [facts.links[starts[0]][0]] if len(facts.links.get(starts[0], ())) == 2 else []
        return any(not _under(p, facts.writable_roots) for p in paths)  # contents, not the root
    elif inv.name in DELETERS:
        paths = list(_paths_of(inv, facts, last=False))
        if inv.args_from_stdin:
            return True  # `... | xargs rm`: which paths is not known yet
    else:
        return False
    roots = facts.writable_roots
    return any(not _under(p, roots) or p in roots for p in paths)


# Where git finds code to run later. The sandbox mounts these read-only (a write fails whatever
# its spelling); a program aimed at them is still asked, so the attempt is seen and decided.
GIT_CODE_PATHS = re.compile(
    r"(?:^|/)\.git/(?:(?:modules|worktrees)/.+/)?"  # a submodule's or worktree's own too
    r"(?:hooks(?:/|$)|config(?:\.worktree)?$|info/attributes$)"
)
NOT_WRITERS = frozenset(
    {
        *("ls", "stat", "test", "[", "true", "false", "cat", "head", "tail", "less", "more"),
        *("grep", "egrep", "fgrep", "rg", "file", "wc", "diff", "cmp", "md5sum", "sha1sum"),
        *("sha256sum", "readlink", "realpath", "basename", "dirname", "git", "echo", "printf"),
    }
)


def _git_code_write(inv: Invocation, facts: ExecFacts) -> bool:
    if inv.name in NOT_WRITERS or (inv.name == "find" and "-delete" not in inv.args):
        return False
    paths = list(_paths_of(inv, facts))
    paths += [resolve(a.split("=", 1)[1], inv.cwd, facts.home) for a in _not_code(inv) if "=" in a]
    return any(GIT_CODE_PATHS.search(p) for p in paths)


# Programs that read a folder's whole tree: given the home (or a folder above it) they read the
# credentials in it. Some only with an option (`cp -r`, `grep -R`).
TREE_READERS = frozenset({"tar", "rsync", "zip", "7z", "7za", "rg", "ag", "rgrep", "bsdtar"})
TREE_READERS_WITH: dict[str, str] = {"cp": "rRa", "scp": "r", "grep": "rR", "egrep": "rR"}
TREE_READERS_LONG = ("--recursive", "--archive", "--dereference-recursive")


def reads_tree(inv: Invocation) -> bool:
    if inv.name in TREE_READERS or inv.via == "find -exec":
        return True  # find runs the command on every file under its start points
    letters = TREE_READERS_WITH.get(inv.name)
    if letters is None:
        return False
    flags = _short_flags([a for a in inv.args if a != "-"])
    return any(c in letters for c in flags) or any(
        a.split("=", 1)[0] in TREE_READERS_LONG for a in inv.args
    )


def holds_credentials(path: str, home: str) -> bool:
    """Whether a folder holds credential folders somewhere below it (`~`, `/home`, `/`)."""
    for folder in CREDENTIAL_DIRS:
        for root in {home, DEFAULT_HOME, "/root"}:
            target = posixpath.join(root, folder)
            if target.startswith(path.rstrip("/") + "/"):
                return True
    return False


def _credential_read(inv: Invocation, facts: ExecFacts) -> bool:
    if inv.name in READERS_SAFE_FOR_CREDENTIALS:
        return False
    paths = list(_paths_of(inv, facts))
    if inv.via == "" and facts.stdin == "file" and facts.stdin_path:
        paths.append(facts.stdin_path)  # `cat < ~/.ssh/id_rsa`
    if any(is_credential_path(p, facts.home) for p in paths):
        return True
    return reads_tree(inv) and any(holds_credentials(p, facts.home) for p in paths)


def _escalation(inv: Invocation, _facts: ExecFacts) -> bool:
    return inv.name in ESCALATORS


def _publish(inv: Invocation, _facts: ExecFacts) -> bool:
    verbs = PUBLISHERS.get(inv.name)
    if verbs is None:
        if inv.name == "python" and "twine" in inv.args:
            return "upload" in inv.args
        return False
    words = [a for a in inv.args if not a.startswith("-")]
    if inv.name == "gh":
        return words[:2] in (["release", "create"], ["release", "upload"])
    if inv.name == "dotnet":
        return words[:2] == ["nuget", "push"]
    if inv.name == "yarn":
        return "publish" in words
    # Which options take a value is the tool's own business (`npm --registry URL --otp 123
    # publish`): `publish` and `upload` are asked wherever they stand, `push` as the verb.
    distinct = [v for v in verbs if v in ("publish", "upload")]
    return any(w in distinct for w in words) or any(w in verbs for w in words[:3])


def _text_from_input(inv: Invocation) -> bool:
    """`... | xargs sh -c` and `... | xargs -I{} sh -c '{}'`: the program text an interpreter is
    given is what xargs read from its input."""
    if not inv.args_from_stdin or _interpreter_family(inv.name) is None:
        return False
    code = program_text_index(inv.name, inv.args)
    if code is None:
        family = _interpreter_family(inv.name) or ""
        letters = _PROGRAM_OPTIONS.get(family, ("e",))
        return any(
            a.startswith("-") and not a.startswith("--") and any(c in a[1:] for c in letters)
            for a in inv.args
        ) or any(a in _PROGRAM_LONG_OPTIONS for a in inv.args)
    return bool(inv.stdin_marker) and inv.stdin_marker in inv.args[code]


def _stdin_program(inv: Invocation, facts: ExecFacts) -> bool:
    if _text_from_input(inv):
        return True
    script = _script_operand(inv.name, inv.args)
    if script is not None and _DESCRIPTOR_PATH.match(script):
        return True  # `bash <(curl ...)`: the program comes from a descriptor, a pipe as a rule
    if facts.stdin not in ("pipe", "socket"):
        return False
    return reads_program_from_stdin(inv.name, (inv.name, *inv.args))


def _fileless(inv: Invocation, facts: ExecFacts) -> bool:
    """A program with no file to name it: a memfd, or a file deleted once opened."""
    return inv.via == "" and (
        facts.program.startswith("/memfd:") or facts.program.endswith(" (deleted)")
    )


def _preload(inv: Invocation, facts: ExecFacts) -> bool:
    return any(k in facts.env for k in ("LD_PRELOAD", "LD_AUDIT")) and inv.via == ""


RULES: tuple[ExecRule, ...] = (
    ExecRule("privilege-escalation", ASK, "runs a command as another user", _escalation),
    ExecRule("git-force-push", ASK, "force-pushes: rewrites history on a remote", _force_push),
    ExecRule("git-push", ASK, "pushes commits to a remote repository", _push),
    ExecRule(
        "git-hooks-config",
        ASK,
        "sets what git runs later (hooks path, fsmonitor, ssh command, templates)",
        _git_hooks,
    ),
    ExecRule("git-shell-alias", ASK, "runs a git alias that starts a shell", _git_shell_alias),
    ExecRule(
        "git-hooks-write",
        ASK,
        "writes where git finds code to run later (.git/hooks, .git/config)",
        _git_code_write,
    ),
    ExecRule(
        "rm-outside-workspace",
        ASK,
        "deletes outside /workspace and /tmp (or all of them)",
        _rm_outside,
    ),
    ExecRule("credential-read", ASK, "touches a credential file", _credential_read),
    ExecRule("package-publish", ASK, "publishes a package or release", _publish),
    ExecRule(
        "pipe-to-interpreter",
        ASK,
        "an interpreter reading a program from a pipe (a download piped to a shell?)",
        _stdin_program,
    ),
    ExecRule("preload", ASK, "loads a library into the program (LD_PRELOAD/LD_AUDIT)", _preload),
    ExecRule(
        "fileless-program", ASK, "runs a program that has no file (memfd, deleted)", _fileless
    ),
)


def classify_exec(facts: ExecFacts, rules: Sequence[ExecRule] = RULES) -> ExecVerdict:
    """The first rule any layer of the exec matches (rules in order, layers outermost first);
    allow when none does."""
    # A copy of one of the image's programs is judged as that program too.
    variants = [facts, *(replace(facts, program=p, same_as=()) for p in facts.same_as)]
    layered = [(variant, unwrap(variant)) for variant in variants]
    if len(layered) == 1 and len(layered[0][1]) == 1:
        # One program, no wrapper, no copy (most execs): the same order, without the loops.
        inv = layered[0][1][0]
        for rule in rules:
            if rule.matches(inv, facts):
                return _matched(rule, inv, facts)
        return ExecVerdict(ALLOW, None, "", inv.text())
    for rule in rules:
        for variant, layers in layered:
            for inv in layers:
                if rule.matches(inv, variant):
                    return _matched(rule, inv, variant)
    return ExecVerdict(ALLOW, None, "", layered[0][1][-1].text())


def _matched(rule: ExecRule, inv: Invocation, facts: ExecFacts) -> ExecVerdict:
    what = inv.text()
    git = _git(inv, facts)
    if git is not None and git.subcommand:
        what = shlex.join(["git", git.subcommand, *git.args])
    return ExecVerdict(rule.action, rule.id, rule.reason, what)


def describe(facts: ExecFacts) -> str:
    """One line for a card: the program, its arguments, where."""
    where = facts.cwd if facts.cwd != WORKSPACE else ""
    text = shlex.join(list(facts.argv)) if facts.argv else facts.program
    if facts.argv and os.path.basename(facts.program) != os.path.basename(facts.argv[0]):
        text = f"{text}  ({facts.program})"
    return f"{text}  in {where}" if where else text
