"""TensorBoard scalars read straight from event files, whoever wrote them (sf, Sample Factory, tensorboardX or
TensorFlow): the format is a sequence of records `length (8 bytes), crc, Event protobuf, crc`, so neither TensorBoard
nor TensorFlow is needed to read one.
"""

from __future__ import annotations

import struct
from pathlib import Path

EVENT_GLOB = ".summary/*/events.out.tfevents.*"
HEADER_BYTES = 12  # uint64 length + uint32 crc of the length
FOOTER_BYTES = 4  # uint32 crc of the data


def event_files(exp_dir: str | Path, policy: int | None = None) -> list[Path]:
    """The event files of an experiment folder (`.summary/<policy>/`), oldest first."""
    pattern = EVENT_GLOB if policy is None else f".summary/{policy}/events.out.tfevents.*"
    return sorted(Path(exp_dir).glob(pattern))


def read_events(paths: list[Path]) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the files, by tag, as (step, value) in file order. A record cut short by a writer still
    running ends that file's reading."""
    from tensorboardX.proto import event_pb2

    series: dict[str, list[tuple[int, float]]] = {}
    for path in paths:
        data, at = path.read_bytes(), 0
        while at + HEADER_BYTES <= len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            end = at + HEADER_BYTES + length
            if end + FOOTER_BYTES > len(data):
                break
            event = event_pb2.Event.FromString(data[at + HEADER_BYTES : end])
            at = end + FOOTER_BYTES
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    series.setdefault(value.tag, []).append((int(event.step), float(value.simple_value)))
    return series


def read_scalars(exp_dir: str | Path, policy: int | None = None) -> dict[str, list[tuple[int, float]]]:
    """Every scalar an experiment wrote, by tag, as (step, value) pairs; steps are env frames in both frameworks."""
    return read_events(event_files(exp_dir, policy))
