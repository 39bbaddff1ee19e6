"""`attn-doctor releases`: show and refresh the release catalogue the fix planner pins from."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from doctor.commands.common import emit
from doctor.errors import ExitCode, InputError

releases_app = typer.Typer(help="The release catalogue `fix` pins from: real versions, torch bundles, flash-attn wheels.", no_args_is_help=True)


@releases_app.command("refresh")
def refresh(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the refreshed files here instead of the shipped catalogue."),
    package: Optional[List[str]] = typer.Option(None, "--package", "-p", help="Only this package (repeatable)."),
    method: str = typer.Option("auto", "--method", help="auto (PyPI JSON, then pip) | json | pip"),
    index: str = typer.Option("https://pypi.org", "--index", help="Package index with PyPI's JSON API."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Ask the index, show what is new, write nothing."),
) -> int:
    """Ask the package index for every version of the catalogue's packages (and the CUDA and
    cuDNN new torch releases pin). Writes all files or none; exit 1 when the index is unreachable."""
    from doctor.releases.refresh import refresh as do_refresh
    from doctor.releases.catalogue import CATALOGUE_PACKAGES
    from doctor.resources import rules_dir

    if method not in ("auto", "json", "pip"):
        raise InputError(f"--method {method!r}", hint="use auto, json or pip")
    names = list(package or CATALOGUE_PACKAGES)
    unknown = [n for n in names if n not in CATALOGUE_PACKAGES]
    if unknown:
        raise InputError(f"not in the catalogue: {', '.join(unknown)}", hint="known: " + ", ".join(CATALOGUE_PACKAGES))
    result = do_refresh(
        rules_dir() / "releases", output=output, packages=names, method=method, index=index, python=sys.executable, dry_run=dry_run
    )
    lines = [f"{'would update' if dry_run else 'updated'} via {result.method}:"]
    for name, added in result.added.items():
        lines.append(f"  {name}: {len(added)} new" + (f" ({', '.join(added[-5:])}{' ...' if len(added) > 5 else ''})" if added else ""))
    for path in result.written:
        lines.append(f"  wrote {path}")
    emit("\n".join(lines))
    return int(ExitCode.OK)


@releases_app.command("wheels")
def wheels(
    version: List[str] = typer.Option(..., "--version", "-v", help="flash-attn release whose wheel row to rebuild (repeatable), e.g. 2.8.3.post2."),
    assets_json: Optional[Path] = typer.Option(None, "--assets-json", help="A saved GitHub releases API answer (one release or a list) instead of asking GitHub."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the refreshed file here instead of the shipped catalogue."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Read the assets, show what would change, write nothing."),
) -> int:
    """Rebuild flash-attn-wheels.json rows from the wheels a GitHub release really carries
    (its assets), not the CI matrix at the tag. Exit 1 when GitHub is unreachable."""
    from doctor.releases.wheel_assets import load_assets_file, refresh_wheels
    from doctor.resources import rules_dir

    assets = load_assets_file(assets_json) if assets_json else None
    if assets is not None:
        missing = [v for v in version if v not in assets]
        if missing:
            raise InputError(f"no release v{missing[0]} in the assets file", path=str(assets_json), hint="known: " + ", ".join(sorted(assets)))
    result = refresh_wheels(rules_dir() / "releases", version, output=output, assets=assets, dry_run=dry_run)
    lines = [f"{'would update' if dry_run else 'updated'} flash-attn wheel rows from release assets:"]
    lines += [f"  {v}: wheels for {n} torch line(s)" for v, n in result.updated]
    if result.written:
        lines.append(f"  wrote {result.written}")
    emit("\n".join(lines))
    return int(ExitCode.OK)


@releases_app.command("show")
def show(
    name: str = typer.Argument(..., help="Package name, e.g. flash-attn"),
    releases: Optional[Path] = typer.Option(None, "--releases", help="Release catalogue folder."),
) -> int:
    """List the versions the catalogue knows for a package (torch: with CUDA and cuDNN)."""
    from doctor.releases.catalogue import load_release_catalogue
    from doctor.versions import canonical_name

    rel = load_release_catalogue(releases)
    key = canonical_name(name)
    if key == "torch":
        rows = [f"{r.version}  CUDA {r.cuda}  {r.cudnn_dist}=={r.cudnn}  python {r.python or 'any'}" for r in rel.torch]
        emit("\n".join(rows))
        return int(ExitCode.OK)
    pkg = rel.packages.get(key)
    if pkg is None:
        raise InputError(f"{name} is not in the release catalogue", hint="known: " + ", ".join(rel.packages))
    emit("\n".join(f"{r.version}" + (f"  python {r.python}" if r.python else "") for r in pkg.releases) + f"\n({pkg.source}, {pkg.retrieved})")
    return int(ExitCode.OK)
