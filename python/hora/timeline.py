"""Timeline files: ``python -m hora.timeline merge OUT IN...`` writes one
Chrome trace holding every set's lane from the files the ranks wrote
(``start_timeline(path)``: rank 0 writes ``path``, a rank that coordinates
other sets ``<stem>.rank<r><ext>``; docs/observability.md)."""

import argparse
import glob
import json
import os
import sys


def load(path):
    """The events of one timeline file (a JSON object with ``traceEvents``,
    or a bare JSON array)."""
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not a timeline (invalid JSON: {error})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path} is not a timeline (no traceEvents list)")
    return events


def rank_files(path):
    """``path`` and the files other ranks wrote beside it for the same run."""
    stem, ext = os.path.splitext(path)
    others = sorted(glob.glob(glob.escape(stem) + ".rank*" + glob.escape(ext)))
    return [path] + [p for p in others if p != path]


def merge(inputs):
    """One trace from several files; metadata events that several files
    share are kept once."""
    merged, seen = [], set()
    for path in inputs:
        for event in load(path):
            if event.get("ph") == "M":
                key = json.dumps(event, sort_keys=True)
                if key in seen:
                    continue
                seen.add(key)
            merged.append(event)
    return {"displayTimeUnit": "ms", "traceEvents": merged}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hora.timeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    merge_cmd = commands.add_parser("merge", help="merge the files of one run into one trace")
    merge_cmd.add_argument("output", help="the merged trace to write")
    merge_cmd.add_argument("inputs", nargs="+",
                           help="timeline files; one path alone also takes its .rank<r> siblings")
    args = parser.parse_args(argv)
    inputs = rank_files(args.inputs[0]) if len(args.inputs) == 1 else args.inputs
    try:
        trace = merge(inputs)
    except (OSError, ValueError) as error:
        print(f"hora.timeline: {error}", file=sys.stderr)
        return 2
    with open(args.output, "w") as f:
        json.dump(trace, f)
    print(f"hora.timeline: {len(trace['traceEvents'])} events from {len(inputs)} file(s) in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
