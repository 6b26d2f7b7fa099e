"""Helpers the codec tests share (numpy in test_codec.py, torch in
test_torch.py)."""

from hprm import _native


def codecs(store, n=2, **kwargs):
    """`n` codecs with connections of their own, as separate processes have."""
    return [_native.Codec(store.socket, **kwargs) for _ in range(n)]


def settled(codec, eventually):
    """The store's objects once every reference is released and every
    delivery settled (a receiver claims its reference with a one-way
    message, so "no reference" alone may only mean "not claimed yet").
    Messages (objects sent with deliveries) are freed as they settle, so
    what is left are plain objects, kept as cache."""
    eventually(lambda: all(o["ref_count"] == 0 and o["pending_deliveries"] == 0 for o in codec.store_objects()),
               what="every reference released, every delivery settled")
    return codec.store_objects()
