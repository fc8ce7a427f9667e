#!/usr/bin/env bash
# On the GPU machine, without a package index: install the wheels gathered by scripts/gather_device_wheels.sh, each
# side whose wheels are all in WHEELS (the two may come in two folders, one call each): sf's into PREFIX/sf, Sample
# Factory's into PREFIX/sample_factory, and then PREFIX/sample_factory_python, the machine's python with Sample
# Factory's folder and then sf's on its path (for --sample_factory). Prints the lines that run the device check.
#
#   scripts/install_device_wheels.sh WHEELS [PREFIX]      # PREFIX: /tmp/sf_device by default; PYTHON=... (python3)
set -euo pipefail
wheels=$(cd "${1:?usage: scripts/install_device_wheels.sh WHEELS [PREFIX]}" && pwd)
prefix=${2:-/tmp/sf_device}
python=$(command -v "${PYTHON:-python3}")
repo=$(cd "$(dirname "$0")/.." && pwd)
list="$repo/scripts/device_wheels.txt"
wheel_of() {  # the wheel file of a pinned requirement in $wheels, if it is there
    local name=${1%%==*} version=${1##*==}
    compgen -G "$wheels/$(echo "$name" | tr '[:upper:]-' '[:lower:]_')-$version-*.whl" | head -n 1 || true
}
for side in sf sample_factory; do
    mapfile -t requirements < <(awk -v side="$side" '!/^#/ && NF == 2 && $1 == side {print $2}' "$list")
    files=()
    for requirement in "${requirements[@]}"; do
        file=$(wheel_of "$requirement")
        if [ -z "$file" ]; then
            echo "$side: not installed, $requirement is not in $wheels"
            continue 2
        fi
        files+=("$file")
    done
    "$python" -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$prefix/$side" "${files[@]}"
    echo "$side: installed into $prefix/$side"
done
if [ -d "$prefix/sample_factory/sample_factory" ]; then
    cat > "$prefix/sample_factory_python" <<WRAPPER
#!/bin/sh
# Sample Factory 2.1.1 on this machine: its own packages first, then sf's (vizdoom, faster-fifo, tensorboardX), then
# the machine's torch
PYTHONPATH="$prefix/sample_factory:$prefix/sf" exec "$python" "\$@"
WRAPPER
    chmod +x "$prefix/sample_factory_python"
    with_sample_factory=" --sample_factory $prefix/sample_factory_python"
fi
echo "export PYTHONPATH=$prefix/sf:$repo"
echo "$python -m sf.bench.device_check --out /tmp/device_check${with_sample_factory:-}"
