#!/usr/bin/env bash
# Download the wheels of scripts/device_wheels.txt (both sides, or the one named) for CPython 3.12 on manylinux
# x86_64 into one folder, to carry to a GPU machine that cannot reach a package index. Keep the folder out of git.
#
#   scripts/gather_device_wheels.sh DIR [sf|sample_factory]      # PYTHON=... picks the pip (python3)
set -euo pipefail
dir=${1:?usage: scripts/gather_device_wheels.sh DIR [sf|sample_factory]}
side=${2:-}
list="$(cd "$(dirname "$0")" && pwd)/device_wheels.txt"
mapfile -t requirements < <(awk -v side="$side" '!/^#/ && NF == 2 && (side == "" || $1 == side) {print $2}' "$list")
if [ "${#requirements[@]}" -eq 0 ]; then
    echo "no wheels listed for side '$side' in $list (sides: sf, sample_factory)" >&2
    exit 2
fi
mkdir -p "$dir"
for requirement in "${requirements[@]}"; do  # one at a time: the two sides pin different versions of gymnasium
    "${PYTHON:-python3}" -m pip download --quiet --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        --dest "$dir" "$requirement"
done
du -sh "$dir"
