"""What the experiment reports share: a progress bar over named stages, and writing the results."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def run_with_stages(run: Callable[..., Any], cfg: Any, total: int, progress: bool) -> Any:
    """Run ``run(cfg, on_stage=...)``, advancing a tqdm bar (on stderr) at each named stage."""
    if not progress:
        return run(cfg)
    from tqdm import tqdm

    with tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True) as bar:
        def stage(name: str) -> None:
            if bar.desc:  # the first stage has nothing finished before it
                bar.update(1)
            bar.set_description_str(name)
        res = run(cfg, on_stage=stage)
        bar.update(1)
    return res


def write_outputs(res: Any, tables: str, plot: Callable, plots_dir: str | None, json_out: str | None, out) -> None:
    """Print the tables, draw the plots and dump the JSON the user asked for, saying what was written."""
    print(tables, file=out)
    if plots_dir:
        for p in plot(res, plots_dir):
            print(f"wrote {p}", file=out)
    if json_out:
        with open(json_out, "w") as fh:
            json.dump(res.to_dict(), fh, indent=2)
        print(f"wrote {json_out}", file=out)
