#!/usr/bin/env python3
"""Reads a Perfetto trace with Perfetto's own protos (perfetto_trace_pb2, from the
`perfetto` PyPI package) and prints, as JSON, what tests/it/perfetto.rs and tests/it/record.rs
check in `bperf report --timeline F.perfetto-trace`:

    {"tracks": {uuid: {"name", "parent", "counter"}},
     "slices": {name: {"count", "ns", "args": [names seen]}},
     "slice_tracks": {track name: slices},
     "counters": {track name: {"points", "integral"}},
     "unbalanced": ends without a begin or begins without an end,
     "sequences_cleared": packets that cleared the incremental state}

Interned names are resolved as trace processor resolves them: per sequence, the tables
start again at each packet flagged SEQ_INCREMENTAL_STATE_CLEARED. Events are ordered by
timestamp (stably, as trace processor sorts them); a track's slices nest by begin and
end. A counter's integral is each value times the time to the next on its track.

    perfetto_summary.py TRACE
"""
import json
import sys
from collections import defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks = {}
    events = []  # (ts, order, track, kind, name, args or value)
    names, arg_names, strings = {}, {}, {}
    cleared = 0
    for order, p in enumerate(trace.packet):
        if p.sequence_flags & CLEARED:
            names, arg_names, strings = {}, {}, {}
            cleared += 1
        if p.HasField("interned_data"):
            d = p.interned_data
            names.update({n.iid: n.name for n in d.event_names})
            arg_names.update({n.iid: n.name for n in d.debug_annotation_names})
            strings.update(
                {s.iid: s.str.decode() for s in d.debug_annotation_string_values}
            )
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            tracks[t.uuid] = {
                "name": t.name,
                "parent": t.parent_uuid,
                "counter": t.HasField("counter"),
            }
        elif p.HasField("track_event"):
            e = p.track_event
            name = names.get(e.name_iid, "") if e.HasField("name_iid") else e.name
            args = {}
            for a in e.debug_annotations:
                key = arg_names.get(a.name_iid, "?")
                kind = a.WhichOneof("value")
                value = getattr(a, kind)
                if kind == "string_value_iid":
                    value = strings.get(value)
                args[key] = value
            value = e.double_counter_value if e.HasField("double_counter_value") else None
            events.append((p.timestamp, order, e.track_uuid, e.type, name, args, value))
    events.sort(key=lambda e: (e[0], e[1]))

    slices = defaultdict(lambda: {"count": 0, "ns": 0, "args": set()})
    slice_tracks = defaultdict(int)
    open_slices = defaultdict(list)
    counters = defaultdict(list)
    unbalanced = 0
    for ts, _, track, kind, name, args, value in events:
        if kind == pb.TrackEvent.TYPE_SLICE_BEGIN:
            open_slices[track].append((ts, name, args))
        elif kind == pb.TrackEvent.TYPE_SLICE_END:
            if not open_slices[track]:
                unbalanced += 1
                continue
            begin, name, args = open_slices[track].pop()
            s = slices[name]
            s["count"] += 1
            s["ns"] += ts - begin
            s["args"].update(args)
            slice_tracks[tracks.get(track, {}).get("name", str(track))] += 1
        elif kind == pb.TrackEvent.TYPE_COUNTER:
            counters[tracks.get(track, {}).get("name", str(track))].append((ts, value))
    unbalanced += sum(len(v) for v in open_slices.values())

    def integral(points):
        return sum(v * (points[i + 1][0] - t) for i, (t, v) in enumerate(points[:-1]))

    out = {
        "tracks": {str(k): v for k, v in tracks.items()},
        "slices": {k: {**v, "args": sorted(v["args"])} for k, v in slices.items()},
        "slice_tracks": slice_tracks,
        "counters": {
            k: {"points": len(v), "integral": integral(v)} for k, v in counters.items()
        },
        "unbalanced": unbalanced,
        "sequences_cleared": cleared,
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
