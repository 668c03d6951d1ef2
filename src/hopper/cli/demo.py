"""``hopper demo``: a working root with three sample jobs and where to look."""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

from hopper.cli.common import add_root_args, all_records, context
from hopper.cli.run import setup_logging
from hopper.cli.status import COLUMNS, row, table
from hopper.cli.submit import drop
from hopper.core.states import JobState
from hopper.store.jobfile import ABORT_FILE, iter_run_dirs, read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher

DEMO_JOBS = {
    "demo-hello": """+++
agent = "bash"
+++
A job that succeeds. The body of a bash job is its script:

```bash
echo "hello from $HOPPER_JOB_ID"
for i in 1 2 3; do echo "step $i"; done
uname -sr
```
""",
    "demo-fails": """+++
agent = "bash"
+++
```bash
echo "this job fails on purpose" >&2
exit 3
```
""",
    "demo-aborted": """+++
agent = "bash"
timeout = "5m"
+++
```bash
echo "waiting to be aborted (the demo touches runs/<id>/ABORT)"
sleep 300
```
""",
}


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run three sample jobs on the root and show the results")
    add_root_args(p)
    p.set_defaults(handler=handle)


def _abort_when_running(layout: Layout, stop: threading.Event) -> None:
    """Touch ABORT for the demo-aborted job once it runs (what a person would do)."""
    while not stop.wait(0.1):
        for run_dir in iter_run_dirs(layout.runs):
            try:
                rec = read_record(run_dir)
            except (FileNotFoundError, ValueError):
                continue
            if rec.name == "demo-aborted" and rec.state is JobState.RUNNING:
                (run_dir / ABORT_FILE).touch()
                return


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    setup_logging(False)
    logging.getLogger("hopper").setLevel(logging.WARNING)
    layout.ensure()
    before = {r.id for r in all_records(layout)}
    print(f"hopper demo: root {layout.root}")
    for stem, text in DEMO_JOBS.items():
        print(f"  submitted {drop(layout, text.encode(), stem)}")
    stop = threading.Event()
    helper = threading.Thread(target=_abort_when_running, args=(layout, stop), daemon=True)
    helper.start()
    try:
        Watcher(layout, config.model_copy(update={"kill_grace": 2.0})).run(until_idle=True)
    finally:
        stop.set()
        helper.join()
    records = [r for r in all_records(layout) if r.id not in before]
    print()
    print(table([COLUMNS, *(row(r, r.finished_at or r.created_at) for r in records)]))
    print(f"""
Where to look:
  {layout.runs}/<id>/job.json      the record (state, reason, exit code, times)
  {layout.runs}/<id>/job.log       the output;  tail -f {layout.runs}/*/job.log
  {layout.runs}/<id>/events.jsonl  every transition, one JSON object per line
  {layout.processed}/             the finished prompts
Next:
  hopper status              the table above, for every job
  hopper logs demo-hello     one job's output
  hopper run                 the watcher; then drop *.prompt.md files into {layout.inbox}/""")
    ok = {r.name: r.state for r in records}
    expected = {
        "demo-hello": JobState.SUCCEEDED,
        "demo-fails": JobState.FAILED,
        "demo-aborted": JobState.ABORTED,
    }
    return 0 if all(ok.get(k) == v for k, v in expected.items()) else 1
