"""The suites of `python -m sf.bench.learning`: which envs, which training command, and which TensorBoard scalar
holds the metric on each side, so both frameworks are read the same way (from their own event files, against env
frames)."""

from __future__ import annotations

from dataclasses import dataclass

SF, SAMPLE_FACTORY = "sf", "Sample Factory 2.1.1"


@dataclass(frozen=True)
class LearningSuite:
    module: str  # the training module; the same path exists in the sf_examples of both frameworks
    envs: tuple[str, ...]  # run by default; --games picks others
    flags: tuple[str, ...]  # given to both sides
    sf_flags: tuple[str, ...]  # given to sf only, to make it report the metric Sample Factory reports
    sf_tag: str
    sample_factory_tag: str
    metric: str  # what the metric is, in words, for the table and the plots
    env_prefix: str = ""  # a game given without it gets it (--games qbert means atari_qbert)

    def env_name(self, game: str) -> str:
        return game if game.startswith(self.env_prefix) else f"{self.env_prefix}{game}"


LEARNING_SUITES: dict[str, LearningSuite] = {
    # the Atari example's own defaults on both sides (4 epochs of 4 x 256 samples per 1024, lr 2.5e-4 decaying,
    # synchronous); 2 workers of 4 envs make one 1024-sample iteration per round of rollouts, which Sample
    # Factory's synchronous mode needs. The metric is the one both consoles print: the clipped reward summed over
    # one life (an episode of the learner), averaged over the last 100
    "atari": LearningSuite(
        module="sf_examples.atari.train_atari",
        envs=("atari_spaceinvaders", "atari_qbert", "atari_beamrider"),
        flags=("--num_workers=2", "--num_envs_per_worker=4", "--device=cpu"),
        sf_flags=("--use_record_episode_statistics=False",),
        sf_tag="reward/avg_episode_reward",
        sample_factory_tag="reward/reward",
        metric="clipped reward per life, mean of the last 100",
        env_prefix="atari_",
    ),
    # seconds per run: the mechanics of the tool on an env every install has
    "cartpole": LearningSuite(
        module="sf_examples.train_gym_env",
        envs=("CartPole-v1",),
        flags=(
            "--num_workers=1",
            "--num_envs_per_worker=8",
            "--serial_mode=True",
            "--rollout=32",
            "--batch_size=256",
            "--use_rnn=False",
            "--device=cpu",
        ),
        sf_flags=(),
        sf_tag="reward/avg_episode_reward",
        sample_factory_tag="reward/reward",
        metric="episode return, mean of the last 100",
    ),
}
