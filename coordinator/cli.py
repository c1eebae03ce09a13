"""The `corral` command line (typer + rich).

Commands that reach into agents/ or bench/ import them inside the command, so
the coordinator's core never depends on them.
"""

from __future__ import annotations

import asyncio
import errno
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from ._effects import Effect, ExecOutcome
from ._errors import CorralError
from ._trace import ARCHIVE_PREFIX, SCOPE_PREFIX, Trace

# rich_markup_mode=None: click's plain help, where a flag shows no "<bool>" type
app = typer.Typer(
    rich_markup_mode=None,
    help="Corral: a coordination server for coding agents working in parallel on one repo.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(rich_markup_mode=None,
                        help="Read a coordinator's trace (a git repository).",
                        no_args_is_help=True)
bench_app = typer.Typer(rich_markup_mode=None,
                        help="Benchmarks: print a table; --json prints the report as JSON, "
                             "-o/--json-out FILE writes it.",
                        no_args_is_help=True)
app.add_typer(trace_app, name="trace")
app.add_typer(bench_app, name="bench")

console = Console()
err = Console(stderr=True)

StateOpt = Annotated[Path, typer.Option("--state", "-s", help="Coordinator state directory.")]

# One convention for JSON across the CLI: `--json` is a flag that prints JSON on
# stdout (the human output moves to stderr), `-o/--json-out FILE` writes the
# report to FILE. The old `--json FILE` of `demo` and `bench` still works (a
# hidden positional argument takes the FILE) with a note on stderr.
JsonFlag = Annotated[bool, typer.Option(
    "--json", metavar="", help="Print the report as JSON on stdout (tables go to stderr).")]
JsonOutOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--json-out", "-o", metavar="FILE", help="Write the report as JSON to FILE."),
]
LegacyJsonFile = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Argument(hidden=True, metavar="", show_default=False,
                   help="The old `--json FILE` form: the same as -o FILE."),
]


def _json_target(flag: bool, out: Path | None, legacy: Path | None) -> tuple[bool, Path | None]:
    """(print JSON on stdout?, file to write it to) from --json, -o and the old
    `--json FILE` (parsed as the flag and a positional FILE)."""
    if legacy is None:
        return flag, out
    if not flag:
        _fail(f"unexpected argument {str(legacy)!r}; to write the report as JSON give "
              "-o/--json-out FILE", 2)
    if out is not None:
        _fail("give the report's file once: -o/--json-out FILE", 2)
    err.print(f"[yellow]note:[/] `--json FILE` is the old form; use `-o {legacy}` "
              "(`--json` alone prints JSON on stdout)")
    return False, legacy


def _emit_json(data: Any, to_stdout: bool, path: Path | None) -> None:
    """Write the report to `path` and/or print it on stdout."""
    if path is not None:
        path.write_text(json.dumps(data, indent=2))
        (err if to_stdout else console).print(f"wrote {path}")
    if to_stdout:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
def _backend_name(value: str | None) -> str | None:
    """Refuse an unknown --backend before any work starts (not a KeyError later)."""
    if value is None:
        return None
    import sandboxes

    if value not in sandboxes.backends:
        raise typer.BadParameter(
            f"unknown backend {value!r}; choose one of {', '.join(sorted(sandboxes.backends))}")
    return value


BackendOpt = Annotated[
    Optional[str],  # noqa: UP045 - typer reads the annotation at runtime
    typer.Option(help="Sandbox backend: overlay, fuse, copy (default: the best available).",
                 callback=_backend_name),
]


def _fail(message: str, code: int = 1) -> None:
    err.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


@app.command()
def demo(
    state: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--state", "-s", help="Keep the demo's state here (default: a temp dir)."),
    ] = None,
    backend: BackendOpt = None,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    legacy_json: LegacyJsonFile = None,
) -> None:
    """Run the built-in demo: two scripted agents, a blocked conflict, a rewind, a merge."""
    from agents.demo import run_demo

    to_stdout, json_out = _json_target(json_flag, json_out, legacy_json)
    out = err if to_stdout else console
    try:
        report = asyncio.run(run_demo(out, state, backend))
    except CorralError as e:
        _fail(str(e))
        return
    out.print(
        f"[bold]done[/] in {report.seconds:.2f}s: {report.effects} effects, "
        f"{len(report.blocked)} blocked, merged {', '.join(report.merged) or 'nothing'}, "
        f"tests {'pass' if report.tests_passed else 'FAIL'}"
    )
    _emit_json(report.as_dict(), to_stdout, json_out)
    if not report.tests_passed or len(report.merged) != 2:
        raise typer.Exit(1)


@app.command("run")
def run_cmd(
    repo: Annotated[Path, typer.Option(help="The git repository to work on (at its HEAD).")],
    task: Annotated[list[str], typer.Option("--task", help="A task; repeat for more agents.")],
    model: Annotated[list[str], typer.Option(
        help="PROVIDER/MODEL, e.g. openai/gpt-4o-mini: once for every agent, or once per "
        "--task (in order, e.g. one scripted model per agent).")],
    base_url: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Base URL of an OpenAI-/Anthropic-compatible server."),
    ] = None,
    supervisor: Annotated[
        str, typer.Option(help="conflict-guard, llm:PROVIDER/MODEL, or none.")
    ] = "conflict-guard",
    state: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--state", "-s", help="State directory (default: .git/corral/runs/ID)."),
    ] = None,
    max_steps: Annotated[int, typer.Option(help="Model calls per agent at most.")] = 30,
    max_tokens: Annotated[
        Optional[int], typer.Option(help="Tokens per agent at most.")  # noqa: UP045
    ] = None,
    retries: Annotated[int, typer.Option(help="Attempts per model call (429/5xx).")] = 4,
    backend: BackendOpt = None,
    squash: Annotated[bool, typer.Option(
        "--squash", help="Leave one commit over HEAD per branch instead of the trace's "
        "history (one commit per effect).")] = False,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    agent: Annotated[str, typer.Option(
        help="builtin, mini-swe-agent (an entry point of corral.agents) or module:attr.",
    )] = "builtin",
) -> None:
    """Run one coding agent per task (--agent) in parallel scopes, merge their branches, and
    leave the result as the branch corral/<run-id> in REPO (its working tree is untouched)."""
    from agents.providers import ModelError
    from agents.run import render_report, run_with_progress

    try:
        report = asyncio.run(run_with_progress(
            err if json_flag else console, repo, task, model=model, base_url=base_url,
            supervisor=supervisor, state=state, max_steps=max_steps, max_tokens=max_tokens,
            retries=retries, backend=backend, squash=squash, agent=agent,
        ))
    except (CorralError, ModelError, ValueError) as e:
        _fail(str(e))
        return
    if not json_flag:
        console.print(render_report(report))
    _emit_json(report.as_dict(), json_flag, json_out)
    if not report.ok:
        for message in report.errors:
            err.print(f"[red]error:[/] {message}")
        raise typer.Exit(1)


def _trace(state: Path) -> Trace:
    if not (state / "trace.git" / "HEAD").exists():
        _fail(f"{state} is not a Corral state directory (no trace.git)")
    return Trace(state / "trace.git", writable=False)


def _branch(trace: Trace, scope: str) -> tuple[str, str]:
    """(head, note) of a live scope, or of the newest archive of a discarded one."""
    head = trace.head(scope)
    if head is not None:
        return head, ""
    archives = [r for r in trace.refs(ARCHIVE_PREFIX)
                if r.startswith(f"{ARCHIVE_PREFIX}{scope}-") or r == scope]
    if archives:
        ref = max(archives, key=lambda r: (len(r), r))
        target = trace.ref(ref)
        assert target is not None
        return target, f"{scope} was discarded; its branch is kept as {ref}"
    live = ", ".join(trace.scope_names())
    gone = sorted({r[len(ARCHIVE_PREFIX):].rsplit("-", 1)[0]
                   for r in trace.refs(ARCHIVE_PREFIX) if "/rewound-" not in r})
    _fail(f"no scope {scope!r}; live: {live}" + (f"; discarded: {', '.join(gone)}" if gone
                                                   else ""))
    raise AssertionError  # unreachable: _fail exits


def _status(effect: Effect) -> str:
    """The effect's status, with a command's exit code (a failed test run is not
    just "materialized")."""
    out = effect.outcome
    if isinstance(out, ExecOutcome):
        return f"{effect.status}, timed out" if out.timed_out else (
            f"{effect.status}, exit {out.returncode}")
    return effect.status


@trace_app.command("log")
def trace_log(
    scope: Annotated[str, typer.Argument(help="Scope name (a discarded scope's archive too).")
                     ] = "root",
    state: StateOpt = Path(".corral"),
    full: Annotated[bool, typer.Option("--full", metavar="",
                                       help="Also the parent's history before the fork.")
                    ] = False,
    json_flag: Annotated[bool, typer.Option("--json", metavar="",
                                            help="Print effects as JSON lines.")] = False,
    json_out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--json-out", "-o", metavar="FILE", help="Write effects as JSON lines to FILE.")] = None,
) -> None:
    """The effects on a scope's branch since its fork, oldest first (--full: from the
    snapshot, ancestors' effects included)."""
    trace = _trace(state)
    head, note = _branch(trace, scope)
    entries = trace.log(head)
    if not full:
        start = next((i for i, e in enumerate(entries) if e.effect is not None
                      and e.effect.kind == "scope.fork" and e.effect.scope == scope), 0)
        entries = entries[start:]
    if json_flag or json_out:
        lines = "".join(json.dumps({"commit": e.commit, "effect": e.effect.model_dump(
            mode="json") if e.effect else None}) + "\n" for e in entries)
        if json_out:
            json_out.write_text(lines)
        if json_flag:
            sys.stdout.write(lines)
        return
    if note:
        err.print(f"[yellow]note:[/] {note}")
    table = Table("commit", "id", "kind", "status", "summary", box=None)
    table.columns[4].overflow = "fold"
    for e in entries:
        eff = e.effect
        assert eff is not None
        table.add_row(e.commit[:10], eff.id, eff.kind, _status(eff),
                      eff.summary(status=False))
    console.print(table)


@trace_app.command("show")
def trace_show(
    commit: Annotated[str, typer.Argument(help="Commit id (or a ref).")],
    state: StateOpt = Path(".corral"),
    blobs: Annotated[bool, typer.Option("--blobs", metavar="",
                                        help="Inline the text of the blobs the record "
                                        "names (command output, model request and "
                                        "response, file content).")] = False,
) -> None:
    """One effect record, as JSON (blobs by id; `--blobs` inlines their text,
    `corral trace blob ID` prints one)."""
    trace = _trace(state)
    try:
        entry = trace.show(commit)
    except CorralError as e:
        _fail(str(e))
        return
    record = entry.effect.model_dump(mode="json") if entry.effect else None
    out: dict[str, Any] = {"commit": entry.commit, "parents": entry.parents,
                           "tree": entry.tree, "effect": record}
    if blobs and entry.effect is not None:
        out["blobs"] = {oid: trace.blob(oid).decode("utf-8", "replace")
                        for oid in _blob_ids(record)}
    sys.stdout.write(json.dumps(out, indent=2) + "\n")


def _blob_ids(record: Any) -> list[str]:
    """The blob ids a record names (in its intent and outcome), in order, once each."""
    found: list[str] = []
    keys = ("blob", "stdout", "stderr", "request", "response")

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k in keys and isinstance(v, str) and len(v) == 40 and v not in found:
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk({k: record.get(k) for k in ("intent", "outcome")})
    return found


@trace_app.command("blob")
def trace_blob(
    blob_id: Annotated[str, typer.Argument(help="A blob id from a record (stdout, "
                                           "request, blob...).")],
    state: StateOpt = Path(".corral"),
) -> None:
    """Print one blob of the trace as it is stored (bytes to stdout)."""
    trace = _trace(state)
    try:
        data = trace.blob(blob_id)
    except (CorralError, KeyError, ValueError) as e:
        _fail(f"no blob {blob_id!r} in the trace ({e})")
        return
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


@trace_app.command("graph")
def trace_graph(state: StateOpt = Path(".corral")) -> None:
    """Every scope's history as a graph (git log --graph over the trace). Plain git
    sees the last checkpoint: up to ~2 s behind a running coordinator."""
    import subprocess

    trace = _trace(state)
    if trace.journal.refs:
        err.print(f"[yellow]note:[/] {len(trace.journal.refs)} ref move(s) are in the trace's "
                  "journal, not yet checkpointed (a coordinator is running, or was killed: "
                  "opening it again checkpoints); `corral trace log` shows them")
    # git decorates only heads, tags and remotes by default: name Corral's refs too
    subprocess.run(["git", "--git-dir", str(trace.path), "log", "--graph", "--oneline",
                    "--decorate=short", "--decorate-refs=refs/corral/",
                    f"--glob={SCOPE_PREFIX}*", "--glob=refs/corral/archive/*"])


@app.command()
def serve(
    state: StateOpt = Path(".corral"),
    repo: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="Repository to snapshot (needed only for a new state directory)."),
    ] = None,
    base: Annotated[str, typer.Option(help="Commit of --repo to start from.")] = "HEAD",
    host: Annotated[str, typer.Option(help="Interface to bind (loopback by default).")] = (
        "127.0.0.1"),
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8765,
    policy: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--policy", help="A policy: entry point name (corral.policies) or "
                     "module:attr. Repeatable; asked in order after the conflict guard."),
    ] = None,
    guard: Annotated[bool, typer.Option("--guard/--no-guard",
                                        help="Run the conflict guard first.")] = True,
    gate: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--gate", help="Hold intents at the human gate: KIND or KIND:GLOB "
                     "(e.g. exec, 'fs.write:src/*'). Repeatable."),
    ] = None,
    gate_timeout: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Block a held intent nobody answered after this many seconds."),
    ] = None,
    defer_timeout: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Block a deferred intent whose scope has not merged after this "
                     "many seconds (default 600)."),
    ] = None,
    admin_token_file: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="Read the admin token from this file (else $CORRAL_ADMIN_TOKEN, "
                     "else the one kept in STATE/admin-token, made and printed on first "
                     "use)."),
    ] = None,
    toolchain: Annotated[
        Optional[list[Path]],  # noqa: UP045
        typer.Option(help="A host directory commands see read-only, its bin/ first on "
                     "their PATH (a virtualenv, a toolchain). Repeatable."),
    ] = None,
    limit: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(help="Raise (or lower) an exec limit: NAME=VALUE with NAME one of "
                     "timeout_max, processes, memory, output, file_size, layer, tmp, "
                     "open_files; sizes take K, M, G (e.g. memory=8G). Repeatable."),
    ] = None,
    max_body: Annotated[int, typer.Option(help="Largest request body in bytes (413 beyond).")] = (
        8 * 1024 * 1024),
    body_timeout: Annotated[float, typer.Option(
        help="Seconds a request body may take to arrive (408 beyond).")] = 30.0,
    backend: BackendOpt = None,
) -> None:
    """Serve the coordinator over HTTP: the JSON API, WebSockets, /metrics, /openapi.json,
    and the dashboard at / (open it in a browser; it asks for the admin token)."""
    import os

    from sandboxes import parse_limits

    from ._gate import GateRule
    from ._hub import ServerConfig
    from ._policy import load_policy
    from ._server import run_server

    token = os.environ.get("CORRAL_ADMIN_TOKEN") or None
    if admin_token_file is not None:
        try:
            token = admin_token_file.read_text().strip() or None
        except OSError as e:
            _fail(f"cannot read --admin-token-file {admin_token_file}: {e.strerror}")
    print_token = False
    if token is None:
        token, print_token = _state_admin_token(state)
        if not print_token:
            err.print(f"admin token: the one kept in {state / ADMIN_TOKEN_FILE}")
    try:
        policies = [load_policy(p) for p in policy or []]
        limits = parse_limits(limit or [])
    except (LookupError, ValueError) as e:
        _fail(str(e))
        return
    config = ServerConfig(
        state=state, repo=repo, base=base, backend=backend, policies=policies, guard=guard,
        gate=[GateRule.parse(g) for g in gate or []], gate_timeout=gate_timeout,
        defer_timeout=defer_timeout, admin_token=token, max_body=max_body,
        exec_limits=limits, toolchain=tuple(toolchain or ()),
        body_timeout=body_timeout,
    )
    try:
        asyncio.run(run_server(config, host, port, print_token=print_token))
    except OSError as e:
        if e.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            _fail(f"cannot listen on {host}:{port}: {os.strerror(e.errno).lower()} "
                  "(pick another --port, or --port 0 for any free one)")
        raise


ADMIN_TOKEN_FILE = "admin-token"


def _state_admin_token(state: Path) -> tuple[str, bool]:
    """The admin token kept in `<state>/admin-token` (mode 0600), made on first use,
    so a restarted server keeps its dashboard logged in. Returns (token, new)."""
    import os
    import secrets

    path = state / ADMIN_TOKEN_FILE
    try:
        token = path.read_text().strip()
        if token:
            return token, False
    except FileNotFoundError:
        pass
    except OSError as e:
        _fail(f"cannot read the admin token in {path}: {e.strerror}")
    token = "a." + secrets.token_urlsafe(24)
    try:
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    except OSError as e:
        _fail(f"cannot keep the admin token in {path}: {e.strerror}")
    return token, True


# -- external agents: `corral mcp`, `corral hook` (implemented in agents/) --------------


@app.command("mcp")
def mcp_cmd(
    scope: Annotated[str, typer.Option(help="The scope the tools act on.")],
    url: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(envvar="CORRAL_URL", help="A running `corral serve` (e.g. "
                     "http://127.0.0.1:8765); else --state opens the coordinator in process."),
    ] = None,
    token: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(envvar="CORRAL_TOKEN", help="The scope's token (with --url)."),
    ] = None,
    state: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--state", "-s", help="In process: this state directory."),
    ] = None,
    parent: Annotated[str, typer.Option(help="In process: fork a missing scope from this "
                                        "one.")] = "root",
) -> None:
    """Serve one scope's tools (read, write, edit, run, messages, finish) to an MCP client
    over stdio; every change is reviewed by the supervisor first."""
    from agents.mcp_server import serve_stdio

    if url is None and state is None:
        _fail("give --url URL --token TOKEN (a running corral serve) or --state DIR")
    asyncio.run(serve_stdio(scope, url=url, token=token,
                            state=str(state) if state else None, parent=parent))


@app.command("hook")
def hook_cmd(
    scope: Annotated[str, typer.Option(envvar="CORRAL_SCOPE",
                                       help="The scope mirroring Claude Code's checkout.")],
    url: Annotated[str, typer.Option(envvar="CORRAL_URL", help="A running `corral serve`.")],
    token: Annotated[str, typer.Option(envvar="CORRAL_TOKEN", help="The scope's token.")],
    root: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="The checkout's root (default: the git top level of the event's "
                     "cwd)."),
    ] = None,
) -> None:
    """A Claude Code hook (PreToolUse, PostToolUse): reads the event on stdin, asks the
    supervisor, and answers allow or deny with its reason; records what the tool changed."""
    from agents.hooks import run_hook

    answer = asyncio.run(run_hook(sys.stdin.read(), url=url, token=token, scope=scope,
                                  root=root))
    if answer.output is not None:
        sys.stdout.write(json.dumps(answer.output) + "\n")
    if answer.stderr:
        sys.stderr.write(answer.stderr + "\n")
    raise typer.Exit(answer.exit_code)


def _show(table: Table, report: dict[str, Any], target: tuple[bool, Path | None]) -> None:
    """Print a benchmark's table (on stderr with --json) and its report as JSON."""
    to_stdout, path = target
    (err if to_stdout else console).print(table)
    _emit_json(report, to_stdout, path)


@bench_app.command("substrate")
def bench_substrate(
    sizes: Annotated[str, typer.Option(help="Comma-separated checkout sizes.")] = "10MB,500MB,3GB",
    runs: Annotated[int, typer.Option(help="Iterations per operation (median reported).")] = 20,
    backend: BackendOpt = None,
    cache: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="Where synthetic checkouts are cached (default ~/.cache/corral/bench)."),
    ] = None,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    legacy_json: LegacyJsonFile = None,
    fuse: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option("--fuse/--no-fuse", help="Add the fuse rows (default: where fuse works)."),
    ] = None,
    history: Annotated[str, typer.Option(
        help="History-length axis: effects in one scope, e.g. 1000,10000,50000.")] = "",
    scopes: Annotated[str, typer.Option(
        help="Scope-count axis: live scopes, e.g. 1,16,64,256.")] = "",
    saturate: Annotated[int, typer.Option(
        help="Saturating-writer row: this many writes back to back (0: none).")] = 0,
) -> None:
    """Fork, discard, write, rewind, merge and exec latency on synthetic checkouts;
    with --history/--scopes/--saturate, the long-history, many-scope and
    saturating-writer rows (--sizes '' for those alone)."""
    from bench import scaling, substrate

    to_stdout, json_path = _json_target(json_flag, json_out, legacy_json)
    out = err if to_stdout else console
    size_list = [s.strip() for s in sizes.split(",") if s.strip()]
    report: dict[str, Any] = {}
    if size_list:
        report = substrate.run(size_list, runs=runs, backend=backend, cache=cache, fuse=fuse)
        out.print(substrate.render(report))
    report["scaling"] = scaling.run(
        history=[int(n) for n in history.split(",") if n.strip()],
        scopes=[int(n) for n in scopes.split(",") if n.strip()],
        saturate=saturate, cache=cache)
    for table in scaling.render(report["scaling"]):
        out.print(table)
    _emit_json(report, to_stdout, json_path)


@bench_app.command("soak")
def bench_soak(
    scopes: Annotated[int, typer.Option(help="Scopes working at once.")] = 64,
    minutes: Annotated[float, typer.Option(help="How long they work.")] = 10.0,
    every: Annotated[float, typer.Option(help="Seconds between samples.")] = 30.0,
    cache: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="Where synthetic checkouts are cached (default ~/.cache/corral/bench)."),
    ] = None,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    legacy_json: LegacyJsonFile = None,
) -> None:
    """Many scopes for minutes: RSS, fds, layers, mounts, journal and packs over
    time, then a kill and the reopen."""
    from bench import soak

    target = _json_target(json_flag, json_out, legacy_json)  # before any work
    report = soak.run(scopes=scopes, minutes=minutes, every=every, cache=cache)
    _show(soak.render(report), report, target)


@bench_app.command("server")
def bench_server(
    clients: Annotated[str, typer.Option(help="Comma-separated concurrent client counts.")] = (
        "1,4,16,64"),
    seconds: Annotated[float, typer.Option(help="Duration of each measurement.")] = 3.0,
    guard: Annotated[bool, typer.Option("--guard/--no-guard",
                                        help="Serve with the conflict guard.")] = True,
    backend: BackendOpt = None,
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    legacy_json: LegacyJsonFile = None,
) -> None:
    """HTTP throughput and latency of writes (under the conflict guard) and reads."""
    from bench import server as server_bench

    target = _json_target(json_flag, json_out, legacy_json)  # before any work
    report = server_bench.run([int(c) for c in clients.split(",") if c.strip()],
                              seconds=seconds, backend=backend, guard=guard)
    _show(server_bench.render(report), report, target)


@bench_app.command("replay")
def bench_replay(
    diverge: Annotated[str, typer.Option(help="Steps to diverge at (comma-separated).")] = "4,8",
    json_flag: JsonFlag = False,
    json_out: JsonOutOpt = None,
    legacy_json: LegacyJsonFile = None,
) -> None:
    """Prompt-cache reuse of fork-and-replay against the local model server."""
    from bench import replay as replay_bench

    target = _json_target(json_flag, json_out, legacy_json)  # before any work
    report = replay_bench.run([int(k) for k in diverge.split(",") if k.strip()])
    _show(replay_bench.render(report), report, target)


@bench_app.command(
    "cooperbench", add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def bench_cooperbench(ctx: typer.Context) -> None:
    """CooperBench pair pass rates (solo, coop, supervised) on Corral scopes; `conflicts`
    prints the gold pairs' merge census. --help lists the options."""
    from bench.cooperbench._cli import main as cooperbench_main

    cooperbench_main(list(ctx.args))


def main() -> None:
    try:
        app()
    except CorralError as e:
        err.print(f"[red]error:[/] {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
