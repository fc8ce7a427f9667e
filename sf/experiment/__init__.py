"""The experiment folder on disk, `<train_dir>/<experiment>/`.

`folder.py` writes and reads its files (config.json, summary.json, profile.json, TensorBoard events); `lock.py`
holds one run per folder; `checkpoint.py` saves, rotates and loads checkpoints; `durable.py` writes files a crash
cannot leave half-written; `resume.py` decides, before anything is written, what a resumed run continues from.
"""
