"""The driving pipeline's two neural networks, built as ONNX files with
seeded random weights (nothing is downloaded), and loaded for onnxruntime
on the CPU.

- ``roach_policy``: the PPO agent of Roach (Zhang et al., "End-to-End Urban
  Driving by Imitating a Reinforcement Learning Coach"): six convolutions on
  the 192x192x15 bird's-eye view, two fully connected layers on the
  measurement vector, two fully connected layers on both, then a value head
  and a policy head giving a Beta distribution's alpha and beta for each of
  the 2 actions (acceleration, steering).
- ``yolov5``: a YOLOv5 (v6) detector at 640x640: Conv/C3/SPPF backbone, PAN
  neck and a 3-level detect head (3 anchors x 85 outputs per cell, 25,200
  candidate boxes). ``width`` scales the channels as YOLOv5's
  width_multiple does: 0.5 is YOLOv5s, 0.25 is YOLOv5n; depth is YOLOv5s's.

The weights are random, so the outputs mean nothing; they are seeded, so
they are the same on every run (the pipeline's determinism test relies on
that). What a benchmark measures does not depend on the weights' values:
the operators, shapes and therefore the CPU work per step are those of the
real networks.

Files are cached under ``model_dir()`` ($HPRM_DRIVING_MODELS, default
target/driving-models at the repository root), named by network, size and
seed, and written atomically, so federate processes started together can
all call ``ensure_models``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

ROACH_INPUTS = ("bev", "measurements")
YOLO_INPUT = "images"
YOLO_SIZE = 640
YOLO_ANCHORS = np.array(
    [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]], np.float32
).reshape(3, 3, 2)
YOLO_STRIDES = (8, 16, 32)
YOLO_CLASSES = 80


def model_dir() -> Path:
    env = os.environ.get("HPRM_DRIVING_MODELS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "target" / "driving-models"


class _Graph:
    """Accumulates ONNX nodes and seeded random initializers."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def const(self, array: np.ndarray, kind: str = "w") -> str:
        from onnx import numpy_helper

        nm = self.name(kind)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), nm))
        return nm

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def weights(self, shape: tuple, fan_in: int) -> np.ndarray:
        # 1/sqrt(fan_in) keeps activations bounded through deep stacks (no
        # inf/NaN reaches the simulator, whose state must stay comparable).
        return (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    def conv(self, x: str, cin: int, cout: int, k: int, s: int = 1, p: int | None = None) -> str:
        p = k // 2 if p is None else p
        w = self.const(self.weights((cout, cin, k, k), cin * k * k))
        b = self.const(np.zeros(cout, np.float32), "b")
        return self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])

    def linear(self, x: str, fin: int, fout: int) -> str:
        w = self.const(self.weights((fin, fout), fin))
        b = self.const(np.zeros(fout, np.float32), "b")
        return self.op("Gemm", [x, w, b])

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def silu(self, x: str) -> str:
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def model(self, inputs: list, outputs: list, name: str):
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        # Opset 17 and IR 8: what every onnxruntime of the last years reads.
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# ------------------------------------------------------------------ Roach


def roach_policy(seed: int, bev_shape=(192, 192, 15), measurements: int = 6, actions: int = 2):
    """Roach's PPO policy (XtMaCNN features + value and Beta policy heads).
    Inputs: bev float32 (1, C, H, W) in [0, 1], measurements float32 (1, M).
    Outputs: alpha, beta (1, actions), value (1, 1)."""
    from onnx import TensorProto, helper

    h, w, c = bev_shape
    g = _Graph(seed)
    x = "bev"
    # (out channels, kernel, stride) of Roach's six convolutions, no padding.
    for cin, (cout, k, s) in zip((c, 8, 16, 32, 64, 128), ((8, 5, 2), (16, 5, 2), (32, 5, 2), (64, 3, 2), (128, 3, 2), (256, 3, 1))):
        x = g.relu(g.conv(x, cin, cout, k, s, p=0))
        h, w = (h - k) // s + 1, (w - k) // s + 1
    flat = g.op("Flatten", [x], axis=1)
    m = g.relu(g.linear("measurements", measurements, 256))
    m = g.relu(g.linear(m, 256, 256))
    f = g.op("Concat", [flat, m], axis=1)
    f = g.relu(g.linear(f, 256 * h * w + 256, 512))
    f = g.relu(g.linear(f, 512, 256))
    pi = g.relu(g.linear(g.relu(g.linear(f, 256, 256)), 256, 256))
    one = g.const(np.ones(1, np.float32), "one")
    # Beta parameters > 1 (unimodal), as Roach's policy head gives them.
    alpha = g.op("Add", [g.op("Softplus", [g.linear(pi, 256, actions)]), one])
    beta = g.op("Add", [g.op("Softplus", [g.linear(pi, 256, actions)]), one])
    v = g.linear(g.relu(g.linear(g.relu(g.linear(f, 256, 256)), 256, 256)), 256, 1)
    g.nodes.append(helper.make_node("Identity", [alpha], ["alpha"]))
    g.nodes.append(helper.make_node("Identity", [beta], ["beta"]))
    g.nodes.append(helper.make_node("Identity", [v], ["value"]))
    inputs = [
        helper.make_tensor_value_info("bev", TensorProto.FLOAT, [1, c, bev_shape[0], bev_shape[1]]),
        helper.make_tensor_value_info("measurements", TensorProto.FLOAT, [1, measurements]),
    ]
    outputs = [
        helper.make_tensor_value_info("alpha", TensorProto.FLOAT, [1, actions]),
        helper.make_tensor_value_info("beta", TensorProto.FLOAT, [1, actions]),
        helper.make_tensor_value_info("value", TensorProto.FLOAT, [1, 1]),
    ]
    return g.model(inputs, outputs, "roach_ppo")


# ----------------------------------------------------------------- YOLOv5


def _conv(g: _Graph, x: str, cin: int, cout: int, k: int = 1, s: int = 1, p: int | None = None) -> str:
    """YOLOv5's Conv: convolution (batch norm folded into its bias) + SiLU."""
    return g.silu(g.conv(x, cin, cout, k, s, p))


def _c3(g: _Graph, x: str, cin: int, cout: int, n: int, shortcut: bool = True) -> str:
    c_ = cout // 2
    a = _conv(g, x, cin, c_)
    for _ in range(n):
        y = _conv(g, _conv(g, a, c_, c_, 1), c_, c_, 3)
        a = g.op("Add", [a, y]) if shortcut else y
    b = _conv(g, x, cin, c_)
    return _conv(g, g.op("Concat", [a, b], axis=1), 2 * c_, cout)


def _sppf(g: _Graph, x: str, cin: int, cout: int) -> str:
    c_ = cin // 2
    a = _conv(g, x, cin, c_)
    pools = [a]
    for _ in range(3):
        pools.append(g.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return _conv(g, g.op("Concat", pools, axis=1), 4 * c_, cout)


def _upsample(g: _Graph, x: str) -> str:
    scales = g.const(np.array([1, 1, 2, 2], np.float32), "scales")
    return g.op("Resize", [x, "", scales], mode="nearest")


def yolov5(seed: int, width: float = 0.5, size: int = YOLO_SIZE):
    """A YOLOv5 v6 network (YOLOv5s's depth; channels x ``width`` of YOLOv5l's).
    Input: images float32 (1, 3, size, size) in [0, 1]. Output: output
    (1, 25200, 85) = sigmoid of (x, y, w, h, objectness, 80 class scores)
    per anchor and cell, decoded by ``decode_yolo``."""
    from onnx import TensorProto, helper

    c = [max(8, int(round(ch * width / 8)) * 8) for ch in (64, 128, 256, 512, 1024)]
    g = _Graph(seed)
    x = _conv(g, YOLO_INPUT, 3, c[0], 6, 2, 2)  # P1/2
    x = _conv(g, x, c[0], c[1], 3, 2)  # P2/4
    x = _c3(g, x, c[1], c[1], 1)
    x = _conv(g, x, c[1], c[2], 3, 2)  # P3/8
    p3 = _c3(g, x, c[2], c[2], 2)
    x = _conv(g, p3, c[2], c[3], 3, 2)  # P4/16
    p4 = _c3(g, x, c[3], c[3], 3)
    x = _conv(g, p4, c[3], c[4], 3, 2)  # P5/32
    x = _c3(g, x, c[4], c[4], 1)
    x = _sppf(g, x, c[4], c[4])
    h10 = _conv(g, x, c[4], c[3])
    x = _c3(g, g.op("Concat", [_upsample(g, h10), p4], axis=1), 2 * c[3], c[3], 1, False)
    h14 = _conv(g, x, c[3], c[2])
    out3 = _c3(g, g.op("Concat", [_upsample(g, h14), p3], axis=1), 2 * c[2], c[2], 1, False)
    x = _conv(g, out3, c[2], c[2], 3, 2)
    out4 = _c3(g, g.op("Concat", [x, h14], axis=1), 2 * c[2], c[3], 1, False)
    x = _conv(g, out4, c[3], c[3], 3, 2)
    out5 = _c3(g, g.op("Concat", [x, h10], axis=1), 2 * c[3], c[4], 1, False)
    no = YOLO_CLASSES + 5
    levels = []
    for feat, ch, stride in zip((out3, out4, out5), (c[2], c[3], c[4]), YOLO_STRIDES):
        n = size // stride
        y = g.conv(feat, ch, 3 * no, 1)
        y = g.op("Reshape", [y, g.const(np.array([1, 3, no, n, n], np.int64), "shape")])
        y = g.op("Transpose", [y], perm=[0, 1, 3, 4, 2])
        levels.append(g.op("Reshape", [y, g.const(np.array([1, 3 * n * n, no], np.int64), "shape")]))
    out = g.op("Sigmoid", [g.op("Concat", levels, axis=1)])
    g.nodes.append(helper.make_node("Identity", [out], ["output"]))
    cells = sum(3 * (size // s) ** 2 for s in YOLO_STRIDES)
    inputs = [helper.make_tensor_value_info(YOLO_INPUT, TensorProto.FLOAT, [1, 3, size, size])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, cells, no])]
    return g.model(inputs, outputs, "yolov5")


def _grids(size: int = YOLO_SIZE):
    """Per candidate row of the detector's output: cell x, y, stride, anchor w, h."""
    rows = []
    for level, stride in enumerate(YOLO_STRIDES):
        n = size // stride
        a, yy, xx = np.meshgrid(np.arange(3), np.arange(n), np.arange(n), indexing="ij")
        aw, ah = YOLO_ANCHORS[level, a.ravel(), 0], YOLO_ANCHORS[level, a.ravel(), 1]
        rows.append(np.stack([xx.ravel(), yy.ravel(), np.full(xx.size, stride), aw, ah], 1))
    return np.concatenate(rows).astype(np.float32)


_GRID = None


def decode_yolo(out: np.ndarray, top: int = 100, iou: float = 0.45, conf: float = 0.25) -> np.ndarray:
    """YOLOv5 post-processing on the network's (1, N, 85) output: the
    ``top`` best candidates by objectness x class score, their boxes decoded
    (x1, y1, x2, y2 in input pixels), then greedy non-maximum suppression.
    Returns float32 (K, 6): x1, y1, x2, y2, score, class."""
    global _GRID
    if _GRID is None:
        _GRID = _grids()
    p = out[0]
    score = p[:, 4] * p[:, 5:].max(1)
    idx = np.argpartition(-score, top)[:top]
    idx = idx[np.argsort(-score[idx], kind="stable")]
    idx = idx[score[idx] >= conf]
    q, gr = p[idx], _GRID[idx]
    xy = (q[:, :2] * 2 - 0.5 + gr[:, :2]) * gr[:, 2:3]
    wh = (q[:, 2:4] * 2) ** 2 * gr[:, 3:5]
    boxes = np.concatenate([xy - wh / 2, xy + wh / 2], 1)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    lt = np.maximum(boxes[:, None, :2], boxes[None, :, :2])
    rb = np.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), 2)
    overlap = inter / (area[:, None] + area[None, :] - inter + 1e-9) > iou
    keep = []
    suppressed = np.zeros(len(idx), bool)
    for i in range(len(idx)):  # greedy, best first
        if not suppressed[i]:
            keep.append(i)
            suppressed |= overlap[i]
    k = np.array(keep, np.int64)
    cls = q[k, 5:].argmax(1).astype(np.float32)
    return np.concatenate([boxes[k], score[idx][k, None], cls[:, None]], 1).astype(np.float32)


# ------------------------------------------------------------ files, sessions


def _cached(path: Path, build) -> Path:
    if not path.exists():
        try:
            import onnx
        except ImportError as e:
            raise RuntimeError(f"building the driving models needs the onnx package ({e}); pip install onnx onnxruntime") from e

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        onnx.save(build(), str(tmp))
        os.replace(tmp, path)  # atomic: a concurrent builder writes the same bytes
    return path


def ensure_models(seed: int = 0, detector_width: float = 0.5) -> dict[str, Path]:
    """Builds (once) and returns the paths of the agent's and the detector's ONNX files."""
    d = model_dir()
    return {
        "agent": _cached(d / f"roach-ppo-seed{seed}.onnx", lambda: roach_policy(seed)),
        "detector": _cached(d / f"yolov5-w{detector_width:g}-seed{seed}.onnx", lambda: yolov5(seed + 1, detector_width)),
    }


def session(path: Path, threads: int):
    """An onnxruntime CPU session with ``threads`` intra-op threads and
    sequential execution (the same settings in every system benchmarked)."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise RuntimeError(f"running the driving models needs onnxruntime ({e}); pip install onnxruntime") from e
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
