"""The Hugging Face Hub: a trained policy staged as a folder (model card, config, checkpoint, replay) and pushed from
enjoy with `--push_to_hub --hf_repository=<user>/<repo>`, or pushed as it is with `python -m
sf.huggingface.push_to_hub`; `python -m sf.huggingface.load_from_hub -r <user>/<repo>` brings one back into
`train_dir`, where enjoy runs it offline. Sample Factory's module and flag names."""
