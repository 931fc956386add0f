#!/usr/bin/env python3
"""The partition scenarios' results as Markdown: one row per phase (the fault; the heal where
there is one) of every scenario record `target/partition-lab/partition_*.json` (a `Timeline`,
`tests/partition/timeline.rs`, written by `tests/partition/runner.rs` with the figures of
`tests/partition/figures.rs`). With more than one directory (one run each, e.g. an idle run and
a loaded one), each cell holds every run's value in that order, joined by " / ", as in
docs/partition-lab.md.

  python3 tests/lab/scenario_table.py target/partition-lab [MORE_RUN_DIRS...]

Columns, from each phase of the record (`phases[]`), times in seconds from the phase's start
(the fault, or the heal):

  scenario       the record's `title` up to its first colon; "… healed" for the heal phase
  good backends  `good`
  first          `first_good` ("never": none in the window)
  all            `all_good`
  stream (gap)   `stream_good` and, in brackets, `stream_gap`
  errors         `errors` (requests failed after client-go's retries, failed stream dials)
  ≥1 s           `slow` (requests that took at least the balancer's `connect_timeout`, 1 s)
  slowest        `slowest`
  state changes  the record's `states` in the phase's window `(from, to]`, as "site state +t"

Left out because no record holds them: the verdict (the scenario's assertions run after the
record is written, and a failed run leaves a record too), kubectl's `/readyz` answers (printed,
not recorded), whether the 7 s target was met (printed) and the notes a hand-made table adds
("fail open", the reason `dial: timeout after 1s`). The record also holds figures this table
does not show: `retried`, `lease_gap`, `lease_failures`, `inflight_good`, `inflight_errors`.
A record without a heal phase in one run and with one in another shows "–" for the missing run.
"""

import glob
import json
import os
import re
import sys

HEADER = "| scenario | good backends | first | all | stream (gap) | errors | ≥1 s | slowest | state changes |"


def secs(v, digits=1):
    return "never" if v is None else f"{v:.{digits}f}"


def gap(v):
    return "0" if v == 0 else f"{v:.1f}"


def changes(record, phase):
    """The state changes in the phase's window, times from the phase's start."""
    shown = [
        f"{c['site']} {c['to']} +{c['t'] - phase['from']:.1f}"
        for c in record.get("states", [])
        if phase["from"] < c["t"] <= phase["to"]
    ]
    return ", ".join(shown) or "none"


def cells(record, phase):
    """The phase's row, but for its label and good backends: one value per column."""
    return [
        secs(phase["first_good"]),
        secs(phase["all_good"]),
        f"{secs(phase['stream_good'])} ({gap(phase['stream_gap'])})",
        str(phase["errors"]),
        str(phase["slow"]),
        f"{phase['slowest']:.2f}",
        changes(record, phase),
    ]


def order(name):
    """Scenario number first (`partition_10_…` after `partition_9_…`), then the name."""
    m = re.match(r"partition_(\d+)_", name)
    return (int(m.group(1)) if m else 1_000_000, name)


def records(directory):
    """The scenario records in `directory`, by test name; files of another shape are skipped."""
    found = {}
    for path in glob.glob(os.path.join(directory, "partition_*.json")):
        with open(path) as f:
            r = json.load(f)
        if isinstance(r, dict) and "phases" in r and "scenario" in r:
            found[r["scenario"]] = r
    return found


def main():
    directories = sys.argv[1:]
    if not directories:
        sys.exit(__doc__)
    runs = [records(d) for d in directories]
    names = sorted({n for run in runs for n in run}, key=order)
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for name in names:
        some = next(run[name] for run in runs if name in run)
        label = some["title"].split(":")[0]
        phase_names = []
        for run in runs:
            for p in run.get(name, {}).get("phases", []):
                if p["name"] not in phase_names:
                    phase_names.append(p["name"])
        for pname in phase_names:
            per_run = []
            good = None
            for run in runs:
                r = run.get(name)
                p = next((p for p in r["phases"] if p["name"] == pname), None) if r else None
                per_run.append(cells(r, p) if p else ["–"] * 7)
                if p and good is None:
                    good = ", ".join(p["good"])
            columns = [" / ".join(values) for values in zip(*per_run)]
            row_label = label if pname == "fault" else f"{label} … {'healed' if pname == 'heal' else pname}"
            print(f"| {row_label} | {good} | " + " | ".join(columns) + " |")


if __name__ == "__main__":
    main()
