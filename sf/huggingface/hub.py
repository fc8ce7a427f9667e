"""Staging a policy for the Hub, pushing the staged folder, and bringing a repository's snapshot into `train_dir`.

The staged folder (`<experiment>/hub_upload/`) is exactly what is uploaded: README.md (the model card), config.json,
the checkpoint enjoy evaluated (under `checkpoint_p<i>/`) and the replay video when enjoy recorded one. It stays
after the push, so a push that failed (no network, no login) loses nothing and can be repeated with `python -m
sf.huggingface.push_to_hub`. A downloaded snapshot is that same folder: copied into `train_dir/<repo>`, it is an
experiment enjoy evaluates without a network.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from sf.experiment.config_file import CONFIG_FILE
from sf.huggingface.model_card import Score, model_card

STAGING = "hub_upload"
CARD = "README.md"
CONFIG = CONFIG_FILE
# what a new push replaces on the Hub: an older checkpoint left there would be the newer one once downloaded
REPLACED = ["checkpoint_p*/*.pth", "*.mp4"]
EXIT_FAILED = 1


class HubError(Exception):
    """A push or a download that failed; the message is one line that names the repository and the cause."""


def stage(
    experiment_dir: Path,
    *,
    env: str,
    repo_id: str,
    policy_index: int,
    checkpoint_kind: str,
    enjoy_module: str,
    train_module: str,
    score: Score | None,
    video: Path | None,
) -> Path:
    """Lay out in `<experiment_dir>/hub_upload/` what a push uploads (the folder is made anew each time)."""
    from sf.experiment.checkpoint import CheckpointManager  # torch: not for a load, which only copies files

    newest = CheckpointManager(experiment_dir, policy_index, keep=1).newest(checkpoint_kind)
    if newest is None:
        raise HubError(f"no {checkpoint_kind} checkpoint of policy {policy_index} in {experiment_dir} to push")
    folder = experiment_dir / STAGING
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    (folder / CARD).write_text(model_card(env, repo_id, enjoy_module, train_module, score))
    _place(experiment_dir / CONFIG, folder / CONFIG)
    (folder / newest.path.parent.name).mkdir()
    _place(newest.path, folder / newest.path.parent.name / newest.path.name)
    if video is not None:
        _place(video, folder / video.name)
    return folder


def _place(source: Path, dest: Path) -> None:
    """A hard link where the file system allows one (a checkpoint need not be stored twice), else a copy."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def push(folder: Path, repo_id: str) -> str:
    """Upload the staged folder as the repository's content; the repository is created if needed. Returns its URL."""
    import huggingface_hub

    api = huggingface_hub.HfApi()
    try:
        url = api.create_repo(repo_id=repo_id, exist_ok=True)
        api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            path_in_repo=".",
            commit_message="Upload an sf policy",
            delete_patterns=REPLACED,
        )
    except Exception as exc:  # whatever the transport raises: no network, offline mode, no token, a refusal
        raise HubError(f"cannot push {folder} to {repo_id} on the Hugging Face Hub: {_cause(exc)}") from exc
    return str(url)


def download(repo_id: str) -> Path:
    """The repository's newest snapshot, through the Hub's local cache (offline, the cached one)."""
    import huggingface_hub

    try:
        return Path(huggingface_hub.snapshot_download(repo_id=repo_id))
    except Exception as exc:
        raise HubError(f"cannot download {repo_id} from the Hugging Face Hub: {_cause(exc)}") from exc


def install_snapshot(snapshot: Path, target: Path) -> Path:
    """Copy a snapshot folder to `target` (the experiment folder enjoy reads), files rather than the cache's links.
    An existing `target` is left as it is: the copy is refused."""
    if target.exists():
        raise HubError(f"{target} exists; remove it or load into another --train_dir")
    partial = target.with_name(f".{target.name}.loading")
    if partial.exists():
        shutil.rmtree(partial)  # a load of this repository that was interrupted
    shutil.copytree(snapshot, partial, symlinks=False, ignore=shutil.ignore_patterns(".cache", ".git*"))
    partial.rename(target)
    return target


def failed(err: HubError) -> int:
    """What the Hub commands do with a failure: one `sf: error:` line on stderr, and their exit status."""
    print(f"sf: error: {err}", file=sys.stderr)
    return EXIT_FAILED


def _cause(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text[:300]}"
