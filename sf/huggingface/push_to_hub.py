"""`python -m sf.huggingface.push_to_hub -r <user>/<repo> -d <experiment dir>`: push an experiment's newest policy
without evaluating it again (the model card then carries no score), or push again a folder staged by enjoy's
`--push_to_hub` whose upload failed (`-d <experiment>/hub_upload`). Sample Factory's module and flag names."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sf.envs.families import family_of
from sf.huggingface.hub import CARD, CONFIG, STAGING, HubError, failed, push, stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sf.huggingface.push_to_hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("-r", "--hf_repository", required=True, help="the Hub repository, <user>/<repo>")
    parser.add_argument("-d", "--experiment_dir", required=True, help="the experiment folder (or a staged one)")
    parser.add_argument("--train_script", default=None, help="the training module named in the model card")
    parser.add_argument("--enjoy_script", default=None, help="the evaluation module named in the model card")
    args = parser.parse_args(argv)
    folder = Path(args.experiment_dir)
    try:
        if not (folder / CONFIG).is_file():
            raise HubError(f"{folder} has no {CONFIG}: not an experiment folder")
        if folder.name != STAGING or not (folder / CARD).is_file():
            env = json.loads((folder / CONFIG).read_text())["env"]
            family = family_of(env)
            folder = stage(
                folder,
                env=env,
                repo_id=args.hf_repository,
                policy_index=0,
                checkpoint_kind="latest",
                enjoy_module=args.enjoy_script or family.enjoy_module or "<enjoy module of the env>",
                train_module=args.train_script or family.train_module,
                score=None,
                video=None,
            )
        url = push(folder, args.hf_repository)
    except HubError as err:
        return failed(err)
    print(f"pushed {folder} to {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
