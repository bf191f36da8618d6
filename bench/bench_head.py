"""The local Ray head a benchmark runs against: started as dlrun starts it, its log's tail printed when
the run fails, stopped and its $DLRUN_HOME removed at the end."""
from __future__ import annotations

import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def bench_head(home: Path):
    from infra.local.head import free_port, start_local_head, stop_local_head

    head = None
    try:
        t0 = time.perf_counter()
        head = start_local_head(dashboard_port=free_port(), num_cpus=2)
        print(f"\nRay head {head.dashboard_url} up in {time.perf_counter() - t0:.1f} s", flush=True)
        yield head
    except BaseException:
        log = home / "local_head.log"
        if log.exists():
            print(f"--- {log} (tail) ---\n{log.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        if head is not None:
            stop_local_head(head)
        shutil.rmtree(home, ignore_errors=True)
