"""`accel cache build|info|clear`: the decoded-dataset cache (data.cache)."""

from __future__ import annotations

import argparse
import sys

from ..errors import AccelError
from .options import add_sets


def add(commands) -> None:
    parser = commands.add_parser("cache", help="build, list or clear decoded-dataset caches (data.cache)")
    actions = parser.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="decode a recipe's image files into the cache now")
    build.add_argument("recipe", help="a recipe: its YAML file or a shipped recipe's name (its data.cache.dir is used)")
    add_sets(build)
    for action, text in (("info", "list the cache entries"), ("clear", "delete every cache entry")):
        actions.add_parser(action, help=text).add_argument(
            "--dir", help="cache folder (default: $ACCEL_CACHE_DIR, else ~/.cache/accel/decoded)"
        )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..data import cache

    if args.action == "build":
        from ..config.recipe import load_recipe
        from ..runs.signals import abort_on_signals

        recipe = load_recipe(args.recipe, args.overrides)
        try:
            with abort_on_signals():  # the entry being written is temporary until renamed: it goes
                folders = cache.build_for_recipe(recipe)
        except KeyboardInterrupt:
            print("interrupted: the entry being built was removed; entries already complete are kept", file=sys.stderr)
            return 130
        if not folders:
            raise AccelError(f"{args.recipe}: the dataset is already in memory; there is nothing to cache.")
        print("\n".join(map(str, folders)))
        return 0
    root = cache.cache_dir(args.dir)
    if args.action == "clear":
        removed, building = cache.clear(root)
        print(f"removed {removed} cache entries from {root}")
        for folder in building:
            print(f"left {folder}: another process is building it now")
        return 0
    found = cache.entries(root)
    print(f"{root}: {len(found)} entries" + "".join(f"\n{cache.describe(entry)}" for entry in found))
    return 0
