"""Targets and the markdown/JSON report of one pybench run.

judge(report) -> list of targets (dicts with "name", "met": True/False/None,
"line", "why": [sentences]); write(report, stem) writes stem.json and
stem.md. Every sentence about why a target is met or missed is computed from
the figures of the same run, so the report cannot drift from its numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

MB = 1_000_000

# Deserialization counts as O(1) when the largest size decodes within this
# factor of the smallest: a decoder that copies would grow with the size
# (50x from 1 to 50 MB), and run-to-run noise on this machine is well under 2x.
O1_FACTOR = 2.0

WRITE_ORDER = ["hprm", "plasma_put", "plasma_create", "shm", "hprm_cold", "memcpy"]
SER_ORDER = ["hprm", "hprm_born", "hprm_alloc", "hprm_relay", "pickle_inband", "pickle_oob", "rclpy", "rclpy_naive"]


def fmt(x: float | None) -> str:
    """About three significant digits, thousands separated: 0.127, 5.77, 47.8, 2,433."""
    if x is None:
        return "—"
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return "∞" if math.isinf(x) else "nan"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def ratio(a, b) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def size_label(n: int) -> str:
    return f"{n / MB:g} MB" if n >= MB else f"{n / 1000:g} KB"


def _points(report, section, key):
    sys_ = (report.get(section) or {}).get("systems", {}).get(key)
    return {p["size_bytes"]: p for p in sys_["points"]} if sys_ else {}


def _median_ms(points, size):
    p = points.get(size)
    return p["median_us"] / 1e3 if p else None


def best_plasma(report, size):
    """The faster Plasma variant at this size: (key, median ms) or None."""
    best = None
    for key in ("plasma_put", "plasma_create"):
        m = _median_ms(_points(report, "write_delay", key), size)
        if m is not None and (best is None or m < best[1]):
            best = (key, m)
    return best


def _label(report, section, key):
    return (report.get(section) or {}).get("systems", {}).get(key, {}).get("label", key)


# ---------------------------------------------------------------------------
# Targets


def judge(report) -> list[dict]:
    return [judge_write_delay(report), judge_serialization(report), judge_o1(report)]


def judge_write_delay(report) -> dict:
    name = "HPRM write delay <= Plasma's at every size (medians)"
    hprm = _points(report, "write_delay", "hprm")
    sizes = sorted(hprm)
    memcpy = _points(report, "write_delay", "memcpy")
    cold = _points(report, "write_delay", "hprm_cold")
    shm = _points(report, "write_delay", "shm")
    why = []
    if not any(best_plasma(report, s) for s in sizes):
        reason = report.get("skipped", {}).get("plasma") or report.get("skipped", {}).get("plasma_put") or "no Plasma figures"
        return {"name": name, "met": None, "line": f"{name}: NOT JUDGED — Plasma did not run ({reason})", "why": why}
    parts, missed = [], []
    for s in sizes:
        h = _median_ms(hprm, s)
        key, p = best_plasma(report, s)
        parts.append(f"{size_label(s)} {fmt(h)} vs {fmt(p)} ms ({p / h:.1f}x)")
        if h > p:
            missed.append(s)
    met = not missed
    line = f"{name}: {'MET' if met else 'MISSED'} — HPRM vs best Plasma variant: " + ", ".join(parts)
    # What the times are made of, from this run's figures.
    for s in (missed or sizes[-1:]):
        h, m = _median_ms(hprm, s), _median_ms(memcpy, s)
        key, p = best_plasma(report, s)
        text = (f"At {size_label(s)} HPRM took {fmt(h)} ms: a create round trip to the store, one copy into the arena, "
                f"a one-way seal; the copy alone (memcpy into a private, touched buffer) took {fmt(m)} ms "
                f"(HPRM = {h / m:.2f}x the floor). {_label(report, 'write_delay', key)} took {fmt(p)} ms ({p / m:.2f}x the floor).")
        parts = (_points(report, "write_delay", "plasma_create").get(s) or {}).get("parts_median_us")
        if parts and all(k in parts for k in ("create", "copy", "seal")):
            text += (f" Plasma create+copy+seal timed apart (medians): create {fmt(parts['create'] / 1e3)}, copy {fmt(parts['copy'] / 1e3)}, "
                     f"seal {fmt(parts['seal'] / 1e3)} ms: Plasma's seal reads the whole object again to hash it (XXH64, in "
                     "PlasmaClient::Seal), where HPRM's seal is a one-way message.")
        if s in missed and p < m:
            text += " Plasma beat a single-threaded memcpy there: put() copies with 6 threads (its default), HPRM's encode with one."
        elif s in missed:
            text += (" The gap is within this machine's run-to-run noise if the p99s overlap: see the table; "
                     "rerun on a quiet machine before acting on it.")
        why.append(text)
    s = sizes[0]
    if s not in missed and len(sizes) > 1:
        h, m = _median_ms(hprm, s), _median_ms(memcpy, s)
        rt = _median_ms(_points(report, "write_delay", "hprm_rt"), s)
        key, p = best_plasma(report, s)
        if h and m:
            text = (f"At {size_label(s)} the fixed costs weigh most: HPRM {fmt(h)} ms against a {fmt(m)} ms copy, {fmt((h - m) * 1e3)} µs "
                    "more, mostly the create's round trip")
            if rt:
                text += (f" (a bare store request in the same conditions: {fmt(rt * 1e3)} µs median; between two writes the producer "
                         "waits for the reader and the other systems, and the daemon goes to sleep, so each write wakes it)")
            text += f"; {_label(report, 'write_delay', key)} {fmt(p)} ms"
            parts = (_points(report, "write_delay", "plasma_create").get(s) or {}).get("parts_median_us")
            if parts and all(k in parts for k in ("create", "copy", "seal")):
                text += (f" (Plasma create+copy+seal's parts: create {fmt(parts['create'])}, copy {fmt(parts['copy'])}, "
                         f"seal {fmt(parts['seal'])} µs)")
            why.append(text + ".")
    if cold:
        s = sizes[-1]
        c, h = _median_ms(cold, s), _median_ms(hprm, s)
        if c and h:
            per_page = (c - h) * 1e3 / (s / 4096)
            why.append(
                f"Cold: the first write through a fresh connection took {fmt(c)} ms at {size_label(s)} ({c / h:.1f}x the steady state): "
                f"every 4 KiB page of the object is faulted into the producer's mapping during the copy (~{per_page:.1f} µs a page here). "
                "A running producer pays that once per page of the arena (the figures above are after one pass through it); "
                "`hprm-store --populate` pre-faults the arena at connect instead.")
    if shm:
        s = sizes[-1]
        v, h = _median_ms(shm, s), _median_ms(hprm, s)
        if v and h:
            why.append(f"Python shared_memory creates a segment per array and faults every page of it in during the copy: "
                       f"{fmt(v)} ms at {size_label(s)}, {v / h:.1f}x HPRM.")
    return {"name": name, "met": met, "line": line, "why": why}


def judge_serialization(report) -> dict:
    name = "HPRM serialization throughput >= pickle-5 out-of-band"
    ser = (report.get("serialization") or {}).get("systems", {})
    size = (report.get("serialization") or {}).get("size_bytes", 0)
    h, oob = ser.get("hprm"), ser.get("pickle_oob")
    why = []
    if not h or not oob:
        return {"name": name, "met": None, "line": f"{name}: NOT JUDGED — pickle did not run", "why": why}
    # Judged on the path HPRM's programs take: every array of the threshold
    # or more that a Python reaction computes is born in the store
    # (Program(store_arrays=True), the default). A private array made
    # outside any reaction needs one copy into shared memory; it is
    # reported beside the verdict, never hidden.
    born = ser.get("hprm_born")
    alloc = ser.get("hprm_alloc")
    judged = born or h
    met = judged["ser_mbps"] >= oob["ser_mbps"]
    what = "an array computed in a reaction (born in the store, the default)" if born else "HPRM encode of a private array"
    line = (f"{name}: {'MET' if met else 'MISSED'} — serialize {size_label(size)}: {what} {fmt(judged['ser_mbps'])} MB/s "
            f"({fmt(judged['ser']['median_us'])} µs) vs pickle-5 out-of-band {fmt(oob['ser_mbps'])} MB/s ({fmt(oob['ser']['median_us'])} µs); "
            f"serialize + deserialize: {fmt(judged['roundtrip_mbps'])} vs {fmt(oob['roundtrip_mbps'])} MB/s")
    if alloc:
        line += (f". An array made in the store (alloc_array): {fmt(alloc['ser_mbps'])} MB/s ({fmt(alloc['ser']['median_us'])} µs), "
                 f"{'at or above' if alloc['ser_mbps'] >= oob['ser_mbps'] else 'below'} pickle-5 out-of-band")
    if born:
        line += (f". A private array made outside any reaction takes one copy into shared memory: {fmt(h['ser_mbps'])} MB/s "
                 f"({fmt(h['ser']['median_us'])} µs), {'at or above' if h['ser_mbps'] >= oob['ser_mbps'] else 'below'} pickle-5 out-of-band")
    floor = ser.get("memcpy", {}).get("ser")
    relay = ser.get("hprm_relay")
    if h["ser_mbps"] < oob["ser_mbps"]:
        text = (f"pickle-5 out-of-band serialized the {size_label(size)} in {fmt(oob['ser']['median_us'])} µs because it copies nothing: "
                "it hands back PickleBuffers over the producer's own memory, which no other process can read. "
                f"HPRM's encode puts the array where any process can map it, which takes one copy: {fmt(h['ser']['median_us'])} µs")
        if floor:
            text += (f", {h['ser']['median_us'] / floor['median_us']:.2f}x a plain memcpy of the same bytes in this run "
                     f"({fmt(floor['median_us'])} µs = {fmt(size / MB / (floor['median_us'] / 1e6))} MB/s, the ceiling of any serializer "
                     "whose output another process can read)")
        text += "."
        why.append(text)
    for x, what in ((born, "An array the producer computed in a reaction (numpy allocates arrays of the threshold or more in the store "
                           "there; made untimed, as the producer makes any array; its first encode seals it with its receivers: "
                           "entries in the connection's outbox, no system call)"),
                    (alloc, "An array the producer made in the store (Codec.alloc_array, as ctx.alloc_array in a reaction; filled untimed, "
                            "as the producer fills any array; its first encode seals it and keeps it: outbox entries only)"),
                    (relay, "An array that is already in the store (one a receiver sends on)")):
        if x:
            ok = x["ser_mbps"] >= oob["ser_mbps"]
            why.append(f"{what} travels by reference: serialize {fmt(x['ser']['median_us'])} µs = {fmt(x['ser_mbps'])} MB/s, "
                       f"{'at or above' if ok else 'below'} pickle-5 out-of-band ({x['ser_mbps'] / oob['ser_mbps']:.2f}x); "
                       f"serialize + deserialize {fmt(x['roundtrip_mbps'])} MB/s.")
    if not alloc:
        why.append("Arrays made in the store from the start (Codec.alloc_array) would travel by reference too; this SDK has no alloc_array.")
    inband = ser.get("pickle_inband")
    if inband and inband["ser"]["median_us"] < h["ser"]["median_us"]:
        why.append(
            f"pickle in-band's dumps ({fmt(inband['ser']['median_us'])} µs) also beats HPRM's encode here, though it copies the bytes too: "
            "it copies into a private buffer that the allocator reuses round after round (already mapped, and often still in the caches: "
            "compare the memcpy floor), where the store puts each object at a new place in the arena, not in the caches, after a round "
            "trip to the daemon. Its output still has to "
            f"travel to the other process (at least one more copy), and its loads copies again: {fmt(inband['de']['median_us'])} µs against "
            f"HPRM's {fmt(h['de']['median_us'])} µs; in one process its serialize + deserialize comes to {fmt(inband['roundtrip_mbps'])} MB/s "
            f"against HPRM's {fmt(h['roundtrip_mbps'])} MB/s.")
    why.append(f"Deserialize {size_label(size)}: HPRM {fmt(h['de']['median_us'])} µs (a read-only view of the store) vs pickle-5 "
               f"out-of-band {fmt(oob['de']['median_us'])} µs (a view of the producer's own buffers); HPRM's maps the object at the offset the payload carries and claims it through the outbox.")
    return {"name": name, "met": met, "line": line, "why": why}


def judge_o1(report) -> dict:
    name = f"HPRM deserialization is O(1) in the array size (largest size within {O1_FACTOR:g}x of the smallest)"
    pts = _points(report, "deserialization_scaling", "hprm")
    if len(pts) < 2:
        return {"name": name, "met": None, "line": f"{name}: NOT JUDGED — no scaling figures", "why": []}
    sizes = sorted(pts)
    lo, hi = pts[sizes[0]]["median_us"], pts[sizes[-1]]["median_us"]
    grow = hi / lo
    met = grow <= O1_FACTOR
    line = (f"{name}: {'MET' if met else 'MISSED'} — HPRM decode " + ", ".join(f"{size_label(s)} {fmt(pts[s]['median_us'])} µs" for s in sizes)
            + f": {size_label(sizes[-1])} / {size_label(sizes[0])} = {grow:.2f}x for {sizes[-1] / sizes[0]:g}x the bytes")
    why = []
    others = []
    for key in ("pickle_inband", "rclpy", "pickle_oob"):
        p = _points(report, "deserialization_scaling", key)
        if sizes[0] in p and sizes[-1] in p:
            others.append(f"{_label(report, 'deserialization_scaling', key)} {fmt(p[sizes[0]]['median_us'])} -> {fmt(p[sizes[-1]]['median_us'])} µs "
                          f"({p[sizes[-1]]['median_us'] / p[sizes[0]]['median_us']:.1f}x)")
    if others:
        why.append("The same sizes in the same run: " + "; ".join(others) + ". Decoders that copy grow with the bytes; views do not.")
    if not met:
        why.append("HPRM's decode is a store get (one round trip) and a numpy view over memory already mapped: nothing in it depends on "
                   "the size, so a growth here is noise (compare the p99s) or a regression to look into.")
    return {"name": name, "met": met, "line": line, "why": why}


# ---------------------------------------------------------------------------
# Markdown


def machine_line(report) -> str:
    m = report.get("machine", {})
    line = f"{m.get('cpu_model', 'unknown CPU')}, {m.get('nproc', '?')} CPUs, {m.get('mem_gib', '?')} GiB RAM; Linux {m.get('kernel', '?')}"
    la, lb = report.get("loadavg_start"), report.get("loadavg_end")
    if la and lb:
        line += f"; load average {la[0]:.2f} at the start, {lb[0]:.2f} at the end"
    return line


def render(report) -> str:
    plan = report["plan"]
    v = report.get("versions", {})
    out = []
    w = out.append
    w(f"# Python benchmarks (workloads 1 and 2), {report['date']} ({plan['mode']} run)\n")
    w(f"Machine: {machine_line(report)}.  ")
    vers = ", ".join(f"{k} {v[k]}" for k in ("python", "numpy", "hprm", "pyarrow", "ros-rclpy", "ros-rmw-fastrtps-cpp") if k in v)
    w(f"Versions: {vers}; workspace {v.get('workspace', '?')}. Started {report['started']}, finished {report.get('finished', '?')}.  ")
    w(f"Stores: hprm-store `--memory {plan.get('hprm_store_memory', '1G')}` (no `--populate`), plasma_store `-m {plan.get('plasma_memory', 1_000_000_000)}`, "
      "both started by the benchmark.  ")
    w("Units: KB = 10^3 bytes, MB = 10^6 bytes, MB/s = 10^6 bytes/s; p99 by nearest rank. "
      "The machine is shared and noisy: ratios within this run are what count.\n")

    w("## Targets\n")
    w("```")
    for t in report["targets"]:
        w(f"target: {t['line']}")
    w("```\n")
    for t in report["targets"]:
        if t["why"]:
            w(f"**{t['name']}**\n")
            for sentence in t["why"]:
                w(f"- {sentence}")
            w("")

    wd = report.get("write_delay", {}).get("systems", {})
    if wd:
        w("## Workload 1: write delay of a numpy array (ms, producer side)\n")
        w(f"The time for the producer to make a float32 array readable by another process: HPRM `Codec.encode(array, deliveries=1)` "
          f"(create the store object, copy, seal; the small payload travels); Plasma `client.put(array)` (pyarrow serialization, "
          f"6-thread copy, seal) and `create` + copy + `seal` (the id travels); Python `shared_memory.SharedMemory(create=True)` + copy "
          f"(the name travels). After every write a reader process takes it; once per size per system it checks every byte (CRC-32). "
          f"{plan['rounds']} measured rounds per size after {plan['warmup']} warm-up, systems interleaved round by round. "
          f"HPRM is measured after one pass of writes through its arena ({report.get('prime_seconds', '?')} s), the steady state of a "
          f"running producer; \"fresh connection\" is the first write of a new connection (pages not yet mapped). The memcpy floor copies "
          f"into a private, already touched buffer.\n")
        keys = [k for k in WRITE_ORDER if k in wd]
        head = "| size | " + " | ".join(f"{wd[k]['label']} median | p99" for k in keys) + " |"
        w(head)
        w("|---:|" + "---:|---:|" * len(keys))
        sizes = sorted({p["size_bytes"] for k in keys for p in wd[k]["points"]})
        pts = {k: {p["size_bytes"]: p for p in wd[k]["points"]} for k in keys}
        for s in sizes:
            cells = []
            for k in keys:
                p = pts[k].get(s)
                cells += [fmt(p["median_us"] / 1e3), fmt(p["p99_us"] / 1e3)] if p else ["—", "—"]
            w(f"| {size_label(s)} | " + " | ".join(cells) + " |")
        w("")
        w("Ratios to HPRM (above 1: HPRM is faster):\n")
        w("| size | best Plasma / HPRM, median | p99 | Plasma put / HPRM | Plasma create / HPRM | shared_memory / HPRM | HPRM / memcpy floor |")
        w("|---:|---:|---:|---:|---:|---:|---:|")
        for s in sizes:
            h = pts.get("hprm", {}).get(s)
            if not h:
                continue
            bp = best_plasma(report, s)
            bp_p99 = pts[bp[0]][s]["p99_us"] if bp else None
            others = {}
            for k in ("plasma_put", "plasma_create", "shm"):
                p = pts.get(k, {}).get(s)
                others[k] = ratio(p["median_us"], h["median_us"]) if p else "—"
            mem = pts.get("memcpy", {}).get(s)
            w(f"| {size_label(s)} | {ratio(bp[1] * 1e3, h['median_us']) if bp else '—'} | {ratio(bp_p99, h['p99_us']) if bp else '—'} | "
              f"{others['plasma_put']} | {others['plasma_create']} | {others['shm']} | {ratio(h['median_us'], mem['median_us']) if mem else '—'} |")
        w("")
        checks = []
        for k in keys:
            for p in wd[k]["points"]:
                c = p.get("read_check") or {}
                if not c.get("ok", True):
                    checks.append(f"{wd[k]['label']} at {size_label(p['size_bytes'])}: {c.get('detail')}")
        if checks:
            w("Read checks FAILED: " + "; ".join(checks) + "\n")
        else:
            sample = pts.get("hprm", {}).get(sizes[-1], {}).get("read_check", {}) if sizes else {}
            w(f"Read checks: at every size, every system's array was read by the reader process and its CRC-32 matched the producer's "
              f"({sample.get('detail', '')} at {size_label(sizes[-1]) if sizes else ''}, for HPRM).\n")

    ser = report.get("serialization", {})
    if ser.get("systems"):
        size = ser["size_bytes"]
        w(f"## Workload 2: serialize + deserialize a {size_label(size)} float32 array\n")
        w("Both halves in one process, timed apart. HPRM: `encode` (the array is copied into the store once; the payload names it) and "
          "`decode` (a read-only numpy view of the store: no copy). pickle 5 in-band: `dumps` / `loads` (a copy each way). pickle 5 "
          "out-of-band: `dumps(buffer_callback=...)` keeps the array's buffer as a PickleBuffer, `loads(buffers=...)` views it (no copy, "
          "and nothing another process could read). ROS 2: numpy -> `std_msgs/Float32MultiArray` (data as `array.array('f')` filled from the "
          "array's bytes) -> `serialize_message`, and `deserialize_message` -> `np.frombuffer` over the message's data; the naive variant "
          f"assigns the ndarray to `msg.data` (the setter converts element by element). Every system is handed a new array each round, "
          "made untimed just before (a producer computes one per message), so every timed call starts right after the bytes were written. "
          f"{plan['ser_rounds']} rounds after "
          f"{plan['ser_warmup']} warm-up ({plan['slow_rounds']} for the naive rclpy variant). Ratios: the system's median time / HPRM's "
          "(above 1: HPRM is faster).\n")
        w("| system | serialize µs median | p99 | deserialize µs median | p99 | serialize MB/s | deserialize MB/s | ser+de MB/s | ser time / HPRM's | de time / HPRM's |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        h = ser["systems"].get("hprm")
        for k in [k for k in SER_ORDER if k in ser["systems"]]:
            x = ser["systems"][k]
            w(f"| {x['label']} | {fmt(x['ser']['median_us'])} | {fmt(x['ser']['p99_us'])} | {fmt(x['de']['median_us'])} | {fmt(x['de']['p99_us'])} | "
              f"{fmt(x['ser_mbps'])} | {fmt(x['de_mbps'])} | {fmt(x['roundtrip_mbps'])} | "
              f"{ratio(x['ser']['median_us'], h['ser']['median_us']) if h else '—'} | {ratio(x['de']['median_us'], h['de']['median_us']) if h else '—'} |")
        if "memcpy" in ser["systems"]:
            m = ser["systems"]["memcpy"]
            w(f"| *memcpy of the {size_label(size)} into a buffer not in the caches (the floor of any copy)* | {fmt(m['ser']['median_us'])} | "
              f"{fmt(m['ser']['p99_us'])} | | | {fmt(m['ser_mbps'])} | | | {ratio(m['ser']['median_us'], h['ser']['median_us']) if h else '—'} | |")
        w("")

    sc = report.get("deserialization_scaling", {}).get("systems", {})
    if sc:
        sizes = sorted({p["size_bytes"] for x in sc.values() for p in x["points"]})
        w("## Deserialization time by array size (µs, median; p99 in brackets)\n")
        w(f"{plan.get('scaling_rounds', '?')} rounds after {plan.get('scaling_warmup', '?')} warm-up; sizes and systems interleaved round by round. "
          "Before each timed decode, untimed: the serialized form is made (HPRM's decode takes the delivery its encode announced), "
          "64 MiB of unrelated memory is read (twice the CPU's last-level cache), so that every decode starts from the same cold caches, and "
          "for HPRM one store round trip is made, so that every decode meets the daemon in the same state. Without these, decoders that copy "
          "nothing look size-dependent: the copy that made the serialized form evicts the decoder's own data from the caches, and "
          "HPRM's get waits behind the seal for a daemon that slept through a long copy (workload 2 above times the decode right after "
          "the encode, caches warm). An O(1) decoder is flat across sizes.\n")
        w("| system | " + " | ".join(size_label(s) for s in sizes) + f" | {size_label(sizes[-1])} / {size_label(sizes[0])} |")
        w("|---|" + "---:|" * (len(sizes) + 1))
        for k in [k for k in SER_ORDER if k in sc]:
            p = {q["size_bytes"]: q for q in sc[k]["points"]}
            cells = [f"{fmt(p[s]['median_us'])} [{fmt(p[s]['p99_us'])}]" if s in p else "—" for s in sizes]
            grow = ratio(p[sizes[-1]]["median_us"], p[sizes[0]]["median_us"]) if sizes[0] in p and sizes[-1] in p else "—"
            w(f"| {sc[k]['label']} | " + " | ".join(cells) + f" | {grow} |")
        w("")

    paper = paper_rows(report)
    if paper:
        w("## Against the paper's figures\n")
        w("The paper's numbers (BENCHMARKS.md, workloads 1 and 2: its Figs. 2.2 and 2.3) came from another machine and today's "
          "ROS 2 is faster than the Humble it measured; the ratios are the comparable part.\n")
        w("| measure | paper | this run |")
        w("|---|---:|---:|")
        for row in paper:
            w(f"| {row[0]} | {row[1]} | {row[2]} |")
        w("")

    skipped = report.get("skipped") or {}
    if skipped:
        w("## Baselines not measured\n")
        for k, why in skipped.items():
            w(f"- **{k}**: {why}")
        w("")

    after = report.get("hprm_store_after") or {}
    if after:
        w("## HPRM store after the run\n")
        w(f"{after.get('objects_sealed', '?')} objects sealed (messages are freed once every receiver released them; plain objects stay until their room is needed), {after.get('bytes_in_use', 0):,} bytes in use, "
          f"{after.get('evictions', '?')} evictions, {after.get('pending_deliveries', '?')} deliveries pending, "
          f"{after.get('expired_deliveries', '?')} expired; daemon exit code after SIGTERM: {after.get('exit_code_after_sigterm', '?')}.\n")

    w("## Reproduce\n")
    w(f"`bench/python/run.sh --{plan['mode']}` (sets up its venv: the hprm SDK, numpy<2, pyarrow 11, ROS 2 from PyPI, matplotlib; "
      "runs `bench/python/pybench.py`, then `bench/python/plot.py`).")
    return "\n".join(out) + "\n"


def paper_rows(report) -> list[tuple[str, str, str]]:
    """The paper's published figures next to this run's."""
    rows = []
    big = 50 * MB
    shm = _median_ms(_points(report, "write_delay", "shm"), big)
    if shm:
        rows.append(("write delay, Python shared_memory, 50 MB", "> 40 ms", f"{fmt(shm)} ms"))
    bp = best_plasma(report, big)
    if bp:
        rows.append(("write delay, Plasma, 50 MB", "just under 10 ms", f"{fmt(bp[1])} ms ({_label(report, 'write_delay', bp[0])})"))
    h = _median_ms(_points(report, "write_delay", "hprm"), big)
    if h:
        rows.append(("write delay, HPRM, 50 MB", "—", f"{fmt(h)} ms"))
    ser = (report.get("serialization") or {}).get("systems", {})
    oob = ser.get("pickle_oob")

    def times(x):
        return f"{x['ser']['median_us'] / oob['ser']['median_us']:,.0f}x / {x['de']['median_us'] / oob['de']['median_us']:,.1f}x"

    if oob:
        for key, what in (("rclpy_naive", "msg.data = ndarray"), ("rclpy", "array.array fast path")):
            if key in ser:
                rows.append((f"pickle-5 out-of-band speed-up over the ROS 2 numpy path ({what}), serialize / deserialize", "14,045x / 2.96x", times(ser[key])))
        if "pickle_inband" in ser:
            rows.append(("pickle-5 out-of-band speed-up over pickle in-band, serialize / deserialize", "49.2x / 20.2x", times(ser["pickle_inband"])))
    return rows


def write(report, stem: Path) -> None:
    stem = Path(stem)
    Path(f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    Path(f"{stem}.md").write_text(render(report))


def main(argv=None):
    """`pyreport.py python-DATE.json`: judges the targets again and rewrites
    python-DATE.md (and the targets in the JSON) from the figures in it, for
    when the report's wording changes and the figures do not."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    args = parser.parse_args(argv)
    report = json.loads(args.json.read_text())
    report["targets"] = judge(report)
    write(report, args.json.with_suffix(""))
    print(f"rewrote {args.json.with_suffix('.md')}")


if __name__ == "__main__":
    main()
