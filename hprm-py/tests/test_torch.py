"""torch tensors through the Python codec (ext 6) against a real hprm-store:
exact round trips of every dtype numpy shares with torch, layouts, zero-copy
tensors over the store, deliveries, echoes by reference, `copy=True`, the
pickle fallback (bfloat16), Rust reading a Python-sent tensor, and a
program of two federates sending tensors."""

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hprm  # noqa: E402
from hprm import _native  # noqa: E402
from support import codecs, settled  # noqa: E402

Codec = _native.Codec
SharedBuffer = _native.SharedBuffer

MIB = 1 << 20
PROGRAMS = Path(__file__).parent / "programs"



def same_tensor(got, sent):
    """Exact equality: a CPU tensor of the same dtype and shape, every element."""
    assert type(got) is torch.Tensor, type(got)
    assert got.device.type == "cpu" and not got.requires_grad
    assert got.dtype == sent.dtype, (got.dtype, sent.dtype)
    assert got.shape == sent.shape, (got.shape, sent.shape)
    sent = sent.detach().cpu()
    assert torch.equal(got, sent) or (got.is_floating_point() and torch.equal(got.isnan(), sent.isnan()) and torch.equal(got.nan_to_num(), sent.nan_to_num()))


def shared_buffer_of(tensor):
    """The store view under a received tensor's array, or None."""
    a = getattr(tensor, "_hprm_source", None)
    while a is not None and not isinstance(a, SharedBuffer):
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    return a


def inside_the_store(tensor):
    """Whether the tensor's memory lies in the store's shared mapping."""
    view = shared_buffer_of(tensor)
    if view is None:
        return False
    start, end = view.mapping
    address = tensor.data_ptr()
    return start <= address and address + tensor.numel() * tensor.element_size() <= end



def sample(dtype, n):
    """`n` values of `dtype` with negatives, extremes and fractions where the dtype has them."""
    if dtype == torch.bool:
        return torch.arange(n) % 3 == 0
    if dtype.is_complex:
        return torch.complex(torch.arange(n, dtype=torch.float32) / 4 - 3, -torch.arange(n, dtype=torch.float32)).to(dtype)
    if dtype.is_floating_point:
        t = (torch.arange(n, dtype=torch.float64) / 8 - n / 16).to(dtype)
        if n >= 3:
            t[0], t[1], t[2] = float("inf"), float("-inf"), float("nan")
        return t
    info = torch.iinfo(dtype)
    t = torch.randint(max(info.min, -(2**62)), min(info.max, 2**62), (n,), dtype=dtype, generator=torch.Generator().manual_seed(n))
    if n >= 2:
        t[0], t[1] = info.min, info.max
    return t


DTYPES = [torch.float32, torch.float64, torch.float16, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128]


@pytest.mark.parametrize("size", ["inline", "stored"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_exactly(store, eventually, dtype, size):
    sender, receiver = codecs(store)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    n = 10 if size == "inline" else 2 * MIB // itemsize
    sent = sample(dtype, n)
    got = receiver.decode(sender.encode(sent))
    same_tensor(got, sent)
    assert inside_the_store(got) == (size == "stored")
    assert len(sender.store_objects()) == (size == "stored")
    del got
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))


@pytest.mark.parametrize("size", ["inline", "stored"])
def test_shapes_and_layouts(store, size):
    sender, receiver = codecs(store)
    k = 1 if size == "inline" else 128
    base = torch.arange(24 * k * 24, dtype=torch.float32).reshape(24 * k, 24)
    cases = {
        "0-d": torch.tensor(3.5),
        "0-d int": torch.tensor(-7, dtype=torch.int64),
        "empty": torch.empty(0, dtype=torch.float32),
        "empty 2-d": torch.empty(3, 0, dtype=torch.int16),
        "contiguous": base,
        "transposed": base.t(),
        "stepped": base[::3, 1::2],
        "column": base[:, 5],
        "expanded": torch.arange(4.0).expand(6 * k, 4),
        "channels last": torch.arange(2 * 3 * 4 * 5 * k, dtype=torch.float64).reshape(2, 3, 4, 5 * k).to(memory_format=torch.channels_last),
        "negated view": torch.arange(6.0 * k)._neg_view(),
        "conjugated view": torch.complex(torch.arange(4.0 * k), torch.ones(4 * k)).conj(),
    }
    got = receiver.decode(sender.encode(cases))
    assert list(got) == list(cases)
    for name, sent in cases.items():
        same_tensor(got[name], sent)
        assert got[name].is_contiguous(), name


def test_gradients_do_not_travel(store):
    sender, receiver = codecs(store)
    weights = torch.linspace(-1, 1, 100_000, requires_grad=True)
    activations = weights * 2  # has a grad_fn
    got = receiver.decode(sender.encode({"w": weights, "a": activations}))
    same_tensor(got["w"], weights)
    same_tensor(got["a"], activations)
    assert got["a"].grad_fn is None and inside_the_store(got["w"])
    # A Parameter is a tensor too; it arrives as a plain one.
    param = torch.nn.Parameter(torch.ones(3, 3))
    same_tensor(receiver.decode(sender.encode(param)), param)


def test_tensors_mixed_with_arrays_and_plain_values(store):
    sender, receiver = codecs(store)
    sent = {
        "frame": {"rgb": torch.randint(0, 256, (480, 640, 3), dtype=torch.uint8), "depth": np.random.default_rng(1).random((480, 640)).astype(np.float32)},
        "boxes": [torch.tensor([[1.0, 2.0, 3.0, 4.0]]), np.array([0.9])],
        "meta": {"seq": 7, "name": "cam0", "intrinsics": torch.eye(3, dtype=torch.float64)},
    }
    got = receiver.decode(sender.encode(sent))
    same_tensor(got["frame"]["rgb"], sent["frame"]["rgb"])
    assert type(got["frame"]["depth"]) is np.ndarray and np.array_equal(got["frame"]["depth"], sent["frame"]["depth"])
    same_tensor(got["boxes"][0], sent["boxes"][0])
    assert type(got["boxes"][1]) is np.ndarray and np.array_equal(got["boxes"][1], sent["boxes"][1])
    assert got["meta"]["seq"] == 7 and got["meta"]["name"] == "cam0"
    same_tensor(got["meta"]["intrinsics"], sent["meta"]["intrinsics"])
    assert sorted(o["size"] for o in sender.store_objects()) == [480 * 640 * 3, 480 * 640 * 4]
    assert inside_the_store(got["frame"]["rgb"]) and not inside_the_store(got["boxes"][0])


def test_large_tensors_are_zero_copy_views_of_the_store(store, eventually):
    sender, receiver = codecs(store)
    sent = torch.arange(MIB, dtype=torch.float32).reshape(1024, 1024)
    data = sender.encode(sent)
    assert len(data) < 100, "only a reference travels"
    got = receiver.decode(data)
    same_tensor(got, sent)
    view = shared_buffer_of(got)
    assert view is not None
    [obj] = sender.store_objects()
    assert view.object_id == obj["id"] and view.nbytes == sent.numel() * 4 == obj["size"]
    assert hprm.store_object_id(got) == obj["id"] and hprm.store_object_id(sent) is None
    # The tensor's data pointer is the store object's bytes in the shared mapping.
    start, end = view.mapping
    assert got.data_ptr() == view.address and start <= got.data_ptr() and got.data_ptr() + view.nbytes <= end
    with open("/proc/self/maps") as maps:
        mapped = [line for line in maps if line.split()[0] == f"{start:x}-{end:x}"]
    assert len(mapped) == 1 and "memfd:" in mapped[0], mapped
    # The array under it is read-only (torch itself cannot say so).
    assert not got._hprm_source.flags.writeable
    # Views of the tensor keep the object; it goes when the last one does.
    row = got[10]
    del got, view
    gc.collect()
    eventually(lambda: sender.store_objects()[0]["ref_count"] == 1, what="the claim landed")
    assert float(row[0]) == 10 * 1024
    del row
    gc.collect()
    assert settled(sender, eventually) == [], "the last view released it: its delivery settled, it is freed"


def test_four_receivers_share_one_object(store, eventually):
    sender, *receivers = codecs(store, 5)
    sent = torch.rand(512, 1024, dtype=torch.float64)  # 4 MiB
    data = sender.encode({"frame": sent}, deliveries=4)
    got = [r.decode(data)["frame"] for r in receivers]
    [obj] = sender.store_objects()
    assert obj["size"] == sent.numel() * 8
    eventually(lambda: sender.store_objects()[0]["ref_count"] == 4, what="four references claimed")
    for g in got:
        same_tensor(g, sent)
        assert inside_the_store(g) and shared_buffer_of(g).object_id == obj["id"]
    assert len({g.data_ptr() for g in got}) == 4, "four connections, four mappings of one object"
    del g
    got.clear()
    gc.collect()
    assert settled(sender, eventually) == []


def test_copy_gives_private_writable_tensors(store, eventually):
    sender, receiver = codecs(store)
    sent = torch.ones(512, 512, dtype=torch.float64)
    data = sender.encode(sent)
    assert len(sender.store_objects()) == 1
    got = receiver.decode(data, copy=True)
    same_tensor(got, sent)
    assert not inside_the_store(got) and got._hprm_source.flags.writeable
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error")  # no "not writable" warning either
        got[0, 0] = 5
    # Nothing refers to the store any more, though the tensor lives on.
    assert settled(sender, eventually) == []
    assert float(got[0, 0]) == 5 and float(got[1, 1]) == 1
    # Inline tensors are private in any case.
    small = receiver.decode(sender.encode(torch.arange(5)))
    small += 1
    assert small.tolist() == [1, 2, 3, 4, 5]


def test_decoding_raises_no_warning(store):
    import warnings

    sender, receiver = codecs(store)
    data = sender.encode(torch.zeros(MIB // 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = receiver.decode(data)
    assert inside_the_store(got)


def test_a_received_tensor_sent_on_travels_by_reference(store, eventually):
    sender, relay, receiver = codecs(store, 3)
    sent = torch.arange(MIB, dtype=torch.int64)
    tensor = relay.decode(sender.encode(sent))
    # The relay echoes it to two receivers: the same object, two more deliveries.
    data = relay.encode({"again": tensor, "twice": tensor}, deliveries=2)
    assert len(sender.store_objects()) == 1
    forwarded = receiver.decode(data)
    same_tensor(forwarded["again"], sent)
    assert shared_buffer_of(forwarded["again"]).object_id == shared_buffer_of(tensor).object_id
    same_tensor(forwarded["twice"], sent)
    # A part of it, or a reshaped view, is not the received tensor: a new object.
    part = receiver.decode(relay.encode(tensor[: MIB // 2], deliveries=1))
    same_tensor(part, sent[: MIB // 2])
    assert len(sender.store_objects()) == 2
    # The echo of a received tensor as a numpy array still arrives a tensor.
    again = Codec(store.socket).decode(data)
    same_tensor(again["again"], sent)
    del tensor, forwarded, part, again
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))


def test_the_same_tensor_twice_is_stored_once(store):
    sender, receiver = codecs(store)
    big = torch.ones(MIB, dtype=torch.uint8)
    got = receiver.decode(sender.encode({"a": big, "b": [big, big[: MIB // 2]]}))
    assert sorted(o["size"] for o in sender.store_objects()) == [MIB // 2, MIB]
    assert shared_buffer_of(got["a"]) is shared_buffer_of(got["b"][0])


@pytest.mark.parametrize("size", [10, 100_000])
def test_dtypes_numpy_lacks_are_pickled_exactly(store, size):
    sender, receiver = codecs(store)
    sent = {"bf16": (torch.arange(size, dtype=torch.float32) / 3 - 7).to(torch.bfloat16), "half": torch.arange(size, dtype=torch.float16)}
    got = receiver.decode(sender.encode(sent))
    same_tensor(got["bf16"], sent["bf16"])
    same_tensor(got["half"], sent["half"])
    # bfloat16 goes in the pickle, in-band (a message over the in-band
    # limit is spilled whole); float16 is a buffer, out-of-band when large.
    assert not inside_the_store(got["bf16"])
    assert inside_the_store(got["half"]) == (size == 100_000)


def test_other_torch_values_are_pickled():
    codec = Codec()
    for value in [torch.Size([2, 3]), torch.float32, torch.device("cpu")]:
        got = codec.decode(codec.encode(value))
        assert got == value and type(got) is type(value)
    sparse = torch.eye(4).to_sparse()
    got = codec.decode(codec.encode(sparse))
    assert got.is_sparse and torch.equal(got.to_dense(), torch.eye(4))


def test_without_torch_a_receiver_gets_the_array(store):
    """A receiver without torch reads the tensor's array (checked in a
    process where torch cannot be imported)."""
    sender = Codec(store.socket)
    data = sender.encode({"t": torch.arange(100_000, dtype=torch.int32)}, deliveries=1)
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "from hprm import _native\n"
        "got = _native.Codec(sys.argv[1]).decode(bytes.fromhex(sys.stdin.read()))['t']\n"
        "print(type(got).__name__, got.dtype, got.shape, int(got.sum()), got.flags.writeable)\n"
    )
    r = subprocess.run([sys.executable, "-c", script, store.socket], input=data.hex(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ndarray", "int32", "(100000,)", str(sum(range(100_000))), "False"]


def test_rust_reads_what_python_writes(store, eventually):
    from hprm._native import _rust_decode_buffer

    [sender] = codecs(store, 1)
    for sent, dtype in [(torch.arange(12, dtype=torch.int16).reshape(3, 4), "<i2"), (torch.rand(256, 512), "<f4"), (torch.arange(10, dtype=torch.float64).reshape(2, 5).t(), "<f8")]:
        data = sender.encode(sent)
        got_dtype, shape, raw, shared = _rust_decode_buffer(data, store.socket)
        assert (got_dtype, tuple(shape), shared) == (dtype, tuple(sent.shape), sent.numel() * sent.element_size() >= 65536)
        assert bytes(raw) == sent.contiguous().numpy().tobytes()
    # The reader's connection closes right after its one-way claim, which
    # may reach the daemon before the sender's seal: the daemon settles
    # the delivery of a claim left waiting by a consumer that went away.
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))


def test_rust_reads_tensors_in_its_own_struct(store, eventually):
    """The conformance sample with its buffers sent as tensors: Rust's
    `Buffer` and `oob` fields read them as they read arrays."""
    [sender] = codecs(store, 1)
    sample = {
        "seq": 42,
        "name": "rust",
        "gain": 1.5,
        "pixels": torch.from_numpy((np.arange(480 * 640) % 251).astype(np.uint8).reshape(480, 640)),
        "depth": (torch.arange(16, dtype=torch.float32) / 2).reshape(4, 4),
        "ranges": torch.tensor([0.5, 1.5, 2.5], dtype=torch.float64),
        "tags": ["a", "b"],
        "pose": (1.0, -2.0, 0.5),
        "limits": {"hi": 2**40, "lo": -5},
        "note": None,
        "blob": b"\x00\x01\xff",
        "raw": bytes((7 * i) % 256 for i in range(100_000)),
    }
    check = _native._rust_decode_check(sender.encode(sample), store.socket)
    assert check["equal"], (check["differs"], check["debug"][:2000])
    assert sorted(check["shared"]) == ["pixels", "raw"]
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))


def test_federates_send_tensors(daemons_built):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn")
    r = subprocess.run([sys.executable, str(PROGRAMS / "torch_frames.py"), "3"], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    received = [l.split("] ", 1)[1] for l in r.stderr.splitlines() if l.startswith("[detector] received")]
    assert received == [f"received seq={k} exact=True stored=True small_stored=False" for k in range(1, 4)], r.stderr
