"""Stream overlap from an Nsight Systems SQLite export (``nsys export --type sqlite``).

    python profiling/overlap.py trace.sqlite [--main-stream ID] [--json FILE]

Reads ``CUPTI_ACTIVITY_KIND_KERNEL`` (start, end, deviceId, streamId, shortName -> ``StringIds``) and
``NVTX_EVENTS`` (push/pop and start/end ranges; their name in ``text`` or ``textId`` -> ``StringIds``).
Reports, per (device, stream): kernels, busy time (the union of its kernel intervals), the share of it that
overlaps kernels on the main stream ("-" where it is never busy: kernels of zero length) and its four kernels of
most total time (``top_kernels``); and per NVTX range name: count and total time (ranges without a name under
``(unnamed)``).
The main stream is ``--main-stream``, else the stream with the most kernels (the chain and the update
launch more than all workers together). Busy time and overlap come from ``leapfrog_gpu.tools.timeline.overlap``,
the function the stream timeline (``--timeline``, no profiler needed) uses, so both measure the same thing. The
share counts the worker streams alone, as the timeline does: every stream but the main one and those that run
NCCL's kernels only (``nccl...``: a data-parallel run's sums), which are listed with their own overlap.
"""

import json
import sqlite3
import sys

from leapfrog_gpu.tools import guarded
from leapfrog_gpu.tools.cli import Parser, one_file_each, output_refusal, path, written_whole
from leapfrog_gpu.tools.timeline import length, overlap, union

NVTX_RANGES = (59, 60)  # eventType of NvtxPushPopRange and NvtxStartEndRange
UNNAMED = "(unnamed)"
"""The name under which the ranges without one (``text`` and ``textId`` both NULL) are totalled."""


def kernels(db):
    """``[(device, stream, start, end, name)]`` of every kernel, times in ns."""
    return db.execute(
        "SELECT k.deviceId, k.streamId, k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
        "LEFT JOIN StringIds AS s ON k.shortName = s.id"
    ).fetchall()


def nvtx_ranges(db):
    """``[(name, start, end)]`` of every closed NVTX range, times in ns."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'NVTX_EVENTS'").fetchone():
        return []
    types = ", ".join(map(str, NVTX_RANGES))
    return db.execute(
        "SELECT COALESCE(e.text, s.value), e.start, e.end FROM NVTX_EVENTS AS e "
        f"LEFT JOIN StringIds AS s ON e.textId = s.id WHERE e.eventType IN ({types}) AND e.end IS NOT NULL"
    ).fetchall()


def report(path, main_stream=None):
    """The overlap report of the export at ``path``, as a dict (see the module docstring)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.OperationalError as error:
        raise ValueError(f"cannot open {path}: {error}") from None
    try:
        rows = kernels(db)
        ranges = nvtx_ranges(db)
    except sqlite3.DatabaseError as error:
        raise ValueError(f"{path} is not an Nsight Systems SQLite export with CUDA kernels: {error}") from None
    finally:
        db.close()
    if not rows:
        raise ValueError(f"{path} holds no CUDA kernels (was the trace taken with -t cuda?)")
    streams = {}
    for device, stream, start, end, name in rows:
        streams.setdefault((device, stream), []).append((start, end, name))
    if main_stream is None:
        device, main_stream = max(streams, key=lambda key: len(streams[key]))
    else:
        device = next((d for d, s in streams if s == main_stream), None)
        if device is None:
            known = sorted(s for _, s in streams)
            raise ValueError(f"--main-stream {main_stream}: no kernel ran on it; streams: {known}")
    here = {key: [(s, e) for s, e, _ in items] for key, items in streams.items() if key[0] == device}
    workers = [key for key in here if key[1] != main_stream and not _nccl(streams[key])]
    busy, shared, share = overlap(here, (device, main_stream), workers)
    per_stream = []
    for key, items in sorted(streams.items()):
        dev, stream = key
        if dev != device:  # another device: busy time only
            busy[key], shared[key] = length(union((s, e) for s, e, _ in items)), None
        per_stream.append({
            "device": dev, "stream": stream, "main": key == (device, main_stream), "kernels": len(items),
            "busy_ms": busy[key] / 1e6,
            "overlap_with_main": None if shared[key] is None or not busy[key] else shared[key] / busy[key],
            "top_kernels": top_kernels(items),
        })
    totals = {}
    for name, start, end in ranges:
        name = UNNAMED if name is None else name
        count, ns = totals.get(name, (0, 0))
        totals[name] = (count + 1, ns + end - start)
    span = (min(r[2] for r in rows), max(r[3] for r in rows))
    return {
        "main_stream": main_stream, "device": device, "span_ms": (span[1] - span[0]) / 1e6, "streams": per_stream,
        "worker_overlap": share,
        "nvtx": [{"name": name, "count": count, "total_ms": ns / 1e6} for name, (count, ns) in sorted(totals.items())],
    }


def top_kernels(items, count=4):
    """The names of the ``count`` kernels of ``items`` ``[(start, end, name)]`` that take the most time, summed over
    their launches, the longest first (a kernel without a name left out)."""
    totals = {}
    for start, end, name in items:
        if name:
            totals[name] = totals.get(name, 0) + end - start
    return sorted(totals, key=lambda name: (-totals[name], name))[:count]


def _nccl(items):
    """Whether a stream's kernels ``[(start, end, name)]`` are NCCL's alone: a communication stream."""
    return all((name or "").startswith("nccl") for _, _, name in items)


def text(result):
    """The report as lines of text."""
    lines = [f"kernels span {result['span_ms']:.3f} ms; main stream {result['main_stream']} "
             f"(device {result['device']})", "device  stream  kernels   busy ms  overlaps main  kernels"]
    for s in result["streams"]:
        share = s["overlap_with_main"]
        share = "main" if s["main"] else ("-" if share is None else f"{100 * share:.1f}%")
        lines.append(f"{s['device']:>6}  {s['stream']:>6}  {s['kernels']:>7}  {s['busy_ms']:>8.3f}  {share:>13}  "
                     + ", ".join(s["top_kernels"]))
    overall = result["worker_overlap"]
    lines.append("worker-stream kernel time overlapping main-stream kernels: "
                 + ("- (no worker stream)" if overall is None else f"{100 * overall:.1f}%"))
    if result["nvtx"]:
        lines.append("NVTX range              count   total ms")
        lines += [f"{r['name']!s:<22} {r['count']:>6} {r['total_ms']:>10.3f}" for r in result["nvtx"]]
    else:
        lines.append("no NVTX ranges (trace with -t cuda,nvtx and LEAPFROG_NVTX unset or 1)")
    return "\n".join(lines)


def main(argv=None):
    parser = Parser(prog="overlap.py", description="Stream overlap from an nsys SQLite export.")
    parser.add_argument("sqlite")
    parser.add_argument("--main-stream", type=int, default=None)
    parser.add_argument("--json", type=path, metavar="FILE")
    args = parser.parse_args(argv)
    if args.json and (why := output_refusal("--json", args.json) or one_file_each([("the export", args.sqlite),
                                                                                   ("--json", args.json)])):
        parser.error(why)
    try:
        result = report(args.sqlite, args.main_stream)
    except (ValueError, sqlite3.Error) as error:
        parser.error(str(error))
    print(text(result))
    if args.json:
        with written_whole(f"--json {args.json}", args.json) as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, "overlap.py"))
