"""``salience cache list|clear``: the dequantized language models kept under ``$SALIENCE_CACHE``."""

from __future__ import annotations

from salience.cli._common import emit


def _cmd_list(args) -> int:
    from salience.models.lm import cache_entries, cache_root

    entries = cache_entries()
    total = sum(e["bytes"] for e in entries)
    lines = [f"{e['bytes'] / 1e6:10.1f} MB  {e['name']}" for e in entries]
    lines.append(f"{total / 1e6:10.1f} MB in {len(entries)} models under {cache_root()}")
    emit(args, {"root": str(cache_root()), "bytes": total, "models": entries}, "\n".join(lines))
    return 0


def _cmd_clear(args) -> int:
    from salience.models.lm import clear_cache

    removed = clear_cache(args.name)
    emit(args, {"removed": removed}, f"removed {len(removed)} cached models")
    return 0


def add_commands(domains) -> None:
    from salience.cli._common import add_output_options

    cache = domains.add_parser("cache", help="list or clear the cache of dequantized language models")
    commands = cache.add_subparsers(dest="command", required=True)
    p = commands.add_parser("list", help="the cached models, most recently used first, and their size")
    add_output_options(p)
    p.set_defaults(func=_cmd_list)
    p = commands.add_parser("clear", help="remove every cached model, or one by --name")
    p.add_argument("--name", default=None, help="only this cached model (a name from salience cache list)")
    add_output_options(p)
    p.set_defaults(func=_cmd_clear)
