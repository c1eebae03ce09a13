"""The `corral` command line (typer + rich).

Commands that reach into agents/ or bench/ import them inside the command, so
the coordinator's core never depends on them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from ._errors import CorralError
from ._trace import SCOPE_PREFIX, Trace

app = typer.Typer(
    help="Corral: a coordination server for coding agents working in parallel on one repo.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(help="Read a coordinator's trace (a git repository).",
                        no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks: print a table, and --json FILE for data.",
                        no_args_is_help=True)
app.add_typer(trace_app, name="trace")
app.add_typer(bench_app, name="bench")

console = Console()
err = Console(stderr=True)

StateOpt = Annotated[Path, typer.Option("--state", "-s", help="Coordinator state directory.")]
BackendOpt = Annotated[
    Optional[str],  # noqa: UP045 - typer reads the annotation at runtime
    typer.Option(help="Sandbox backend: overlay, copy (default: the best available)."),
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
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Write the demo's report as JSON.")  # noqa: UP045
    ] = None,
) -> None:
    """Run the built-in demo: two scripted agents, a blocked conflict, a rewind, a merge."""
    from agents.demo import run_demo

    try:
        report = asyncio.run(run_demo(console, state, backend))
    except CorralError as e:
        _fail(str(e))
        return
    console.print(
        f"[bold]done[/] in {report.seconds:.2f}s: {report.effects} effects, "
        f"{len(report.blocked)} blocked, merged {', '.join(report.merged) or 'nothing'}, "
        f"tests {'pass' if report.tests_passed else 'FAIL'}"
    )
    if json_out:
        json_out.write_text(json.dumps(report.as_dict(), indent=2))
    if not report.tests_passed or len(report.merged) != 2:
        raise typer.Exit(1)


@app.command("run")
def run_cmd(
    repo: Annotated[Path, typer.Option(help="The git repository to work on (at its HEAD).")],
    task: Annotated[list[str], typer.Option("--task", help="A task; repeat for more agents.")],
    model: Annotated[str, typer.Option(help="PROVIDER/MODEL, e.g. openai/gpt-4o-mini.")],
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
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Run one built-in coding agent per task in parallel scopes, merge their branches, and
    leave the result as the branch corral/<run-id> in REPO (its working tree is untouched)."""
    from agents.providers import ModelError
    from agents.run import render_report, run_with_progress

    try:
        report = asyncio.run(run_with_progress(
            err if json_out else console, repo, task, model=model, base_url=base_url,
            supervisor=supervisor, state=state, max_steps=max_steps, max_tokens=max_tokens,
            retries=retries, backend=backend,
        ))
    except (CorralError, ModelError, ValueError) as e:
        _fail(str(e))
        return
    if json_out:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        console.print(render_report(report))
    if not report.ok:
        for message in report.errors:
            err.print(f"[red]error:[/] {message}")
        raise typer.Exit(1)


def _trace(state: Path) -> Trace:
    if not (state / "trace.git" / "HEAD").exists():
        _fail(f"{state} is not a Corral state directory (no trace.git)")
    return Trace(state / "trace.git", writable=False)


@trace_app.command("log")
def trace_log(
    scope: Annotated[str, typer.Argument(help="Scope name.")] = "root",
    state: StateOpt = Path(".corral"),
    json_out: Annotated[bool, typer.Option("--json", help="Print effects as JSON lines.")] = False,
) -> None:
    """The effects on a scope's branch, oldest first."""
    trace = _trace(state)
    head = trace.head(scope)
    if head is None:
        _fail(f"no scope {scope!r}; scopes: {', '.join(trace.scope_names())}")
        return
    entries = trace.log(head)
    if json_out:
        for e in entries:
            sys.stdout.write(json.dumps({"commit": e.commit, "effect": e.effect.model_dump(
                mode="json") if e.effect else None}) + "\n")
        return
    table = Table("commit", "id", "kind", "status", "summary", box=None)
    for e in entries:
        eff = e.effect
        assert eff is not None
        table.add_row(e.commit[:10], eff.id, eff.kind, eff.status, e.subject)
    console.print(table)


@trace_app.command("show")
def trace_show(
    commit: Annotated[str, typer.Argument(help="Commit id (or a ref).")],
    state: StateOpt = Path(".corral"),
) -> None:
    """One effect record, as JSON."""
    trace = _trace(state)
    try:
        entry = trace.show(commit)
    except CorralError as e:
        _fail(str(e))
        return
    out = {"commit": entry.commit, "parents": entry.parents, "tree": entry.tree,
           "effect": entry.effect.model_dump(mode="json") if entry.effect else None}
    sys.stdout.write(json.dumps(out, indent=2) + "\n")


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
    subprocess.run(["git", "--git-dir", str(trace.path), "log", "--graph", "--oneline",
                    "--decorate", f"--glob={SCOPE_PREFIX}*", "--glob=refs/corral/archive/*"])


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
                     "else a random one, printed)."),
    ] = None,
    max_body: Annotated[int, typer.Option(help="Largest request body in bytes (413 beyond).")] = (
        8 * 1024 * 1024),
    backend: BackendOpt = None,
) -> None:
    """Serve the coordinator over HTTP: the JSON API, WebSockets, /metrics, /openapi.json,
    and the dashboard at / (open it in a browser; it asks for the admin token)."""
    import os

    from ._gate import GateRule
    from ._hub import ServerConfig
    from ._policy import load_policy
    from ._server import run_server

    token = os.environ.get("CORRAL_ADMIN_TOKEN") or None
    if admin_token_file is not None:
        token = admin_token_file.read_text().strip() or None
    try:
        policies = [load_policy(p) for p in policy or []]
    except LookupError as e:
        _fail(str(e))
        return
    config = ServerConfig(
        state=state, repo=repo, base=base, backend=backend, policies=policies, guard=guard,
        gate=[GateRule.parse(g) for g in gate or []], gate_timeout=gate_timeout,
        defer_timeout=defer_timeout, admin_token=token, max_body=max_body,
    )
    asyncio.run(run_server(config, host, port))


def _show(table: Table, report: dict[str, Any], json_out: Path | None) -> None:
    """Print a benchmark's table and, with --json, write its report."""
    console.print(table)
    if json_out:
        json_out.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {json_out}")


@bench_app.command("substrate")
def bench_substrate(
    sizes: Annotated[str, typer.Option(help="Comma-separated checkout sizes.")] = "10MB,500MB,3GB",
    runs: Annotated[int, typer.Option(help="Iterations per operation (median reported).")] = 20,
    backend: BackendOpt = None,
    cache: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="Where synthetic checkouts are cached (default ~/.cache/corral/bench)."),
    ] = None,
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Write the report as JSON.")  # noqa: UP045
    ] = None,
    fuse: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option("--fuse/--no-fuse", help="Add the fuse rows (default: where fuse works)."),
    ] = None,
) -> None:
    """Fork, discard, write, rewind, merge and exec latency on synthetic checkouts."""
    from bench import substrate

    report = substrate.run([s.strip() for s in sizes.split(",") if s.strip()], runs=runs,
                           backend=backend, cache=cache, fuse=fuse)
    _show(substrate.render(report), report, json_out)


@bench_app.command("server")
def bench_server(
    clients: Annotated[str, typer.Option(help="Comma-separated concurrent client counts.")] = (
        "1,4,16,64"),
    seconds: Annotated[float, typer.Option(help="Duration of each measurement.")] = 3.0,
    guard: Annotated[bool, typer.Option("--guard/--no-guard",
                                        help="Serve with the conflict guard.")] = True,
    backend: BackendOpt = None,
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Write the report as JSON.")  # noqa: UP045
    ] = None,
) -> None:
    """HTTP throughput and latency of writes (under the conflict guard) and reads."""
    from bench import server as server_bench

    report = server_bench.run([int(c) for c in clients.split(",") if c.strip()],
                              seconds=seconds, backend=backend, guard=guard)
    _show(server_bench.render(report), report, json_out)


@bench_app.command("replay")
def bench_replay(
    diverge: Annotated[str, typer.Option(help="Steps to diverge at (comma-separated).")] = "4,8",
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Write the report as JSON.")  # noqa: UP045
    ] = None,
) -> None:
    """Prompt-cache reuse of fork-and-replay against the local model server."""
    from bench import replay as replay_bench

    report = replay_bench.run([int(k) for k in diverge.split(",") if k.strip()])
    _show(replay_bench.render(report), report, json_out)


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
