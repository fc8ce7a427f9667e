# CPU image by default; for CUDA pass a CUDA base and the matching torch wheel index, e.g.
#   docker build --build-arg BASE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04 \
#                --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124 -t sf:cuda .
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG TORCH=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG EXTRAS=vizdoom,mujoco,profiling,dev

ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 MUJOCO_GL=egl
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-pip python3-venv make libgl1 libegl1 libosmesa6 ffmpeg \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /sf
COPY . /sf
# torch first, from the index that matches the base image, so the package's own requirement is already met.
RUN python3 -m venv /sf/.venv \
    && /sf/.venv/bin/pip install --no-cache-dir --upgrade pip \
    && /sf/.venv/bin/pip install --no-cache-dir --index-url ${TORCH_INDEX} ${TORCH} \
    && /sf/.venv/bin/pip install --no-cache-dir -e ".[${EXTRAS}]" \
    && touch /sf/.venv/.installed
ENV PATH=/sf/.venv/bin:$PATH

CMD ["python", "-m", "sf_examples.train_gym_env", "--env=CartPole-v1", "--serial_mode=True", "--async_rl=False", \
     "--train_for_env_steps=50000", "--experiment=docker_smoke"]
