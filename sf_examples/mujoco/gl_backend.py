"""Pick an OpenGL backend for MuJoCo's offscreen renderer before anything imports one.

MuJoCo binds PyOpenGL to one platform (EGL, OSMesa or GLFW) the first time it renders, for the whole
process, so a failed attempt cannot be retried in-process with another backend. Each candidate is
therefore probed in a short subprocess, and only a backend that really rendered is exported as
`MUJOCO_GL`. A `MUJOCO_GL` the user set is respected: it is probed, never replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping

PROBE_TIMEOUT_S = 60.0

HOW_TO_GET_ONE = (
    "no OpenGL backend could render MuJoCo frames{tried}, so no video will be written; "
    "on a CPU machine `apt-get install -y libosmesa6` and set MUJOCO_GL=osmesa, "
    "on an NVIDIA GPU machine install the driver's EGL library (libnvidia-gl / libegl1) and set MUJOCO_GL=egl"
)

# renders one frame of an empty model through the same context factory gymnasium's MuJoCo viewer uses
_PROBE_CODE = """
import mujoco
model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='.1'/></worldbody></mujoco>")
with mujoco.Renderer(model, 32, 32) as renderer:
    renderer.update_scene(mujoco.MjData(model))
    assert renderer.render().shape == (32, 32, 3)
"""

Probe = Callable[[str], bool]


def candidate_backends(environ: Mapping[str, str], platform: str = sys.platform) -> list[str]:
    """Backends worth trying, best first: headless ones (EGL uses a GPU when there is one), then a window."""
    if platform == "darwin":
        return ["cgl", "glfw"]
    has_display = bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))
    return ["egl", "osmesa"] + (["glfw"] if has_display else [])


def probe_backend(backend: str) -> bool:
    """Whether MuJoCo renders a frame with MUJOCO_GL=backend, tried in a fresh interpreter."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE_CODE],
            env=dict(os.environ, MUJOCO_GL=backend),
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


def choose_gl_backend(
    environ: Mapping[str, str], probe: Probe = probe_backend, platform: str = sys.platform
) -> tuple[str | None, str | None]:
    """(backend, None) for the first backend that renders, else (None, the one-line advice to show the user)."""
    user_choice = environ.get("MUJOCO_GL")
    candidates = [user_choice] if user_choice else candidate_backends(environ, platform)
    for backend in candidates:
        if probe(backend):
            return backend, None
    tried = f" (MUJOCO_GL={user_choice} was set)" if user_choice else f" (tried {', '.join(candidates)})"
    return None, HOW_TO_GET_ONE.format(tried=tried)


def setup_gl_backend(probe: Probe = probe_backend) -> tuple[str | None, str | None]:
    """Export the chosen backend as MUJOCO_GL unless the user chose one; MuJoCo then sets PYOPENGL_PLATFORM to match.

    When nothing renders, MUJOCO_GL becomes "disable" in this process only: a value MuJoCo rejects (a typo)
    would otherwise stop even the evaluation without video at `import mujoco`.
    """
    backend, advice = choose_gl_backend(os.environ, probe)
    if backend is None:
        os.environ["MUJOCO_GL"] = "disable"
    elif not os.environ.get("MUJOCO_GL"):  # unset or empty: both mean the user left the choice to us
        os.environ["MUJOCO_GL"] = backend
    return backend, advice
