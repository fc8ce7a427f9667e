"""`python -m sf.huggingface.load_from_hub -r <user>/<repo> [-d ./train_dir]`: the repository's policy into
`<train_dir>/<repo>`, an experiment enjoy evaluates (`--experiment=<repo>`) without a network from then on.

A repository downloaded before comes from the Hub's local cache when there is no network (or with
`HF_HUB_OFFLINE=1`). A failure prints one line and exits with status 1; nothing in `train_dir` is changed by it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sf.envs.families import family_of
from sf.huggingface.hub import CONFIG, HubError, download, failed, install_snapshot


def load_from_hub(repo_id: str, train_dir: str | Path) -> Path:
    """Download (or take from the cache) and install; returns the experiment folder."""
    target = Path(train_dir) / repo_id.split("/")[-1]
    if target.exists():  # before any download
        raise HubError(f"{target} exists; remove it or load into another --train_dir")
    snapshot = download(repo_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    return install_snapshot(snapshot, target)


def enjoy_command(experiment: Path) -> str:
    """How to evaluate what was loaded: its env's evaluation module, when its config names a known family."""
    env = json.loads((experiment / CONFIG).read_text()).get("env") if (experiment / CONFIG).is_file() else None
    module = family_of(env).enjoy_module if env else None
    return (
        f"python -m {module or '<enjoy module of the env>'} --env={env} --train_dir={experiment.parent} "
        f"--experiment={experiment.name}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sf.huggingface.load_from_hub", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("-r", "--hf_repository", required=True, help="the Hub repository, <user>/<repo>")
    parser.add_argument("-d", "--train_dir", default="./train_dir", help="where the experiment folder goes")
    args = parser.parse_args(argv)
    if "/" not in args.hf_repository:
        print(f"sf: error: -r/--hf_repository: expected <user>/<repo>, got {args.hf_repository!r}", file=sys.stderr)
        return 2
    try:
        experiment = load_from_hub(args.hf_repository, args.train_dir)
    except HubError as err:
        return failed(err)
    print(f"loaded {args.hf_repository} into {experiment}; evaluate it with:\n  {enjoy_command(experiment)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
