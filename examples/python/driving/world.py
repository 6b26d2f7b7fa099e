"""The simulators the driving pipeline can drive: a synthetic one (always
there) and CARLA (when a server is reachable).

Both give the same interface, stepped in lockstep by the pipeline (CARLA's
synchronous mode): ``render_bev(out)`` and ``render_rgb(out)`` fill the two
sensor frames, ``measurements()`` is the agent's state vector, and
``apply(control)`` applies the fused control and advances one step of
``STEP_S`` simulated seconds.

The synthetic world is a seeded random texture seen from a kinematic
bicycle model: what it renders depends on the vehicle's pose, and the pose
on every control applied, so its frames (and the actions computed from
them) are a function of the seed and of the controls alone: a run with the
same seed is repeatable exactly when the middleware delivers every control
at the step it belongs to.
"""

from __future__ import annotations

import math

import numpy as np

BEV_SHAPE = (192, 192, 15)  # Roach's bird's-eye view: 15 semantic channels
RGB_SHAPE = (720, 1280, 3)  # the front camera, 1280x720 RGB
MEASUREMENTS = 6  # throttle, steer, brake, gear, speed x, speed y (Roach's state)
STEP_S = 0.05  # 20 Hz, CARLA's usual fixed_delta_seconds


class SyntheticWorld:
    """A deterministic stand-in for CARLA with CARLA's frame sizes."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        # Twice the frame size so every pose has a full window to show.
        self._rgb = rng.integers(0, 256, (RGB_SHAPE[0], 2 * RGB_SHAPE[1], 3), np.uint8)
        self._bev = (rng.random((2 * BEV_SHAPE[0], 2 * BEV_SHAPE[1], BEV_SHAPE[2])) < 0.2).astype(np.uint8) * 255
        self.x = self.y = self.yaw = 0.0
        self.speed = 5.0
        self.control = (0.0, 0.0, 0.0)

    def measurements(self) -> np.ndarray:
        t, s, b = self.control
        return np.array([t, s, b, 1.0, self.speed * math.cos(self.yaw), self.speed * math.sin(self.yaw)], np.float32)

    def render_bev(self, out: np.ndarray) -> None:
        h, w, _ = BEV_SHAPE
        oy, ox = int(self.y * 4) % h, int(self.x * 4) % w
        out[:] = self._bev[oy : oy + h, ox : ox + w]
        out[h // 2 - 4 : h // 2 + 4, w // 2 - 2 : w // 2 + 2, 0] = 255  # the ego vehicle

    def render_rgb(self, out: np.ndarray) -> None:
        w = RGB_SHAPE[1]
        off = int(self.x * 20 + self.yaw * 200) % w
        out[:] = self._rgb[:, off : off + w]

    def apply(self, control) -> None:
        """Kinematic bicycle model, one step of STEP_S."""
        throttle, steer, brake = (float(c) for c in control)
        self.control = (throttle, steer, brake)
        dt = STEP_S
        self.speed = max(0.0, self.speed + (4.0 * throttle - 8.0 * brake - 0.05 * self.speed) * dt)
        self.yaw += self.speed / 2.9 * math.tan(0.6 * steer) * dt
        self.x += self.speed * math.cos(self.yaw) * dt
        self.y += self.speed * math.sin(self.yaw) * dt

    def pose(self) -> list[float]:
        return [self.x, self.y, self.yaw, self.speed]

    def close(self) -> None:
        pass


class CarlaWorld:
    """CARLA in synchronous mode: an ego vehicle with a 1280x720 RGB camera;
    the BEV is rasterised from the ego's and the other actors' positions
    (Roach renders it from the map in Python; a rasterisation of actor boxes
    costs the same order of work and has the same size)."""

    def __init__(self, address: str, seed: int) -> None:
        problem = carla_problem(address)
        if problem:
            raise RuntimeError(problem)
        import queue

        import carla

        host, _, port = address.rpartition(":")

        self._carla = carla
        self.client = carla.Client(host, int(port))
        self.client.set_timeout(10.0)
        try:
            self.world = self.client.get_world()
        except RuntimeError as e:
            raise RuntimeError(f"cannot reach a CARLA server at {address} ({e}); start one (CarlaUE4.sh) or leave out --carla for the synthetic simulator") from e
        self._settings = self.world.get_settings()
        s = self.world.get_settings()
        s.synchronous_mode = True
        s.fixed_delta_seconds = STEP_S
        self.world.apply_settings(s)
        bp = self.world.get_blueprint_library()
        spawn = self.world.get_map().get_spawn_points()
        self.vehicle = self.world.spawn_actor(bp.filter("vehicle.*")[seed % len(bp.filter("vehicle.*"))], spawn[seed % len(spawn)])
        cam = bp.find("sensor.camera.rgb")
        cam.set_attribute("image_size_x", str(RGB_SHAPE[1]))
        cam.set_attribute("image_size_y", str(RGB_SHAPE[0]))
        self.camera = self.world.spawn_actor(cam, carla.Transform(carla.Location(x=1.5, z=2.4)), attach_to=self.vehicle)
        self._images: queue.Queue = queue.Queue()
        self.camera.listen(self._images.put)
        self.control = (0.0, 0.0, 0.0)
        self.world.tick()

    def measurements(self) -> np.ndarray:
        v = self.vehicle.get_velocity()
        t, s, b = self.control
        return np.array([t, s, b, 1.0, v.x, v.y], np.float32)

    def render_bev(self, out: np.ndarray) -> None:
        out[:] = 0
        ego = self.vehicle.get_transform().location
        h, w, _ = BEV_SHAPE
        for i, actor in enumerate(self.world.get_actors().filter("*vehicle*")):
            loc = actor.get_location()
            px, py = int(w / 2 + (loc.x - ego.x) * 2), int(h / 2 + (loc.y - ego.y) * 2)
            if 0 <= px < w and 0 <= py < h:
                out[max(0, py - 4) : py + 4, max(0, px - 2) : px + 2, 1 + i % 4] = 255

    def render_rgb(self, out: np.ndarray) -> None:
        image = self._images.get(timeout=10.0)
        bgra = np.frombuffer(image.raw_data, np.uint8).reshape(image.height, image.width, 4)
        out[:] = bgra[:, :, 2::-1]

    def apply(self, control) -> None:
        throttle, steer, brake = (float(c) for c in control)
        self.control = (throttle, steer, brake)
        self.vehicle.apply_control(self._carla.VehicleControl(throttle=throttle, steer=steer, brake=brake))
        self.world.tick()

    def pose(self) -> list[float]:
        t = self.vehicle.get_transform()
        return [t.location.x, t.location.y, t.rotation.yaw, 0.0]

    def close(self) -> None:
        self.camera.stop()
        self.camera.destroy()
        self.vehicle.destroy()
        self.world.apply_settings(self._settings)


def carla_problem(address: str) -> str | None:
    """Why ``--carla ADDRESS`` cannot work here, or None (checked before
    any process starts, so a bad flag is one clear error)."""
    import importlib.util

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return f"--carla {address!r}: give the server as HOST:PORT, e.g. localhost:2000"
    if importlib.util.find_spec("carla") is None:
        return "--carla needs CARLA's Python client: pip install carla (the version of the server)"
    return None


def make_world(seed: int, carla: str | None = None):
    """CARLA at ``carla`` (HOST:PORT) when given, else the synthetic world."""
    return CarlaWorld(carla, seed) if carla else SyntheticWorld(seed)
