"""The `corral` command line (typer + rich).

Commands that reach into agents/ or bench/ import them inside the command, so
the coordinator's core never depends on them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

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


def _trace(state: Path) -> Trace:
    if not (state / "trace.git" / "HEAD").exists():
        _fail(f"{state} is not a Corral state directory (no trace.git)")
    return Trace(state / "trace.git")


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
    """Every scope's history as a graph (git log --graph over the trace)."""
    import subprocess

    trace = _trace(state)
    subprocess.run(["git", "--git-dir", str(trace.path), "log", "--graph", "--oneline",
                    "--decorate", f"--glob={SCOPE_PREFIX}*", "--glob=refs/corral/archive/*"])


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
) -> None:
    """Fork, discard, write, rewind, merge and exec latency on synthetic checkouts."""
    from bench import substrate

    report = substrate.run([s.strip() for s in sizes.split(",") if s.strip()], runs=runs,
                           backend=backend, cache=cache)
    console.print(substrate.render(report))
    if json_out:
        json_out.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {json_out}")


def main() -> None:
    try:
        app()
    except CorralError as e:
        err.print(f"[red]error:[/] {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
