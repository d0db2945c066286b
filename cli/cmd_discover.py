"""``hived discover``: read this machine's GPUs with NVML and write a cell spec."""
from __future__ import annotations

import argparse
import sys

from hived.cli import support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "discover", help=summary,
        description="Ask NVML for this machine's GPUs (model, memory, UUID, PCI bus, NUMA node, "
                    "topology, NVLink, MIG) and write a cell spec: one chain per GPU model, with the "
                    "switch/NVLink, socket and node levels the topology shows. What NVML cannot tell "
                    "is said on stderr with what was assumed.",
        epilog="exit codes: 0 ok, 2 bad arguments, 4 no NVIDIA GPU or driver (use --gpus N)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=None,
                   help="describe a virtual node of N GPUs instead (no GPU needed; for testing)")
    p.add_argument("--host", default=None, help="node name to use (default: this host's name)")
    p.add_argument("--vcs", default=None,
                   help="comma-separated VC names sharing the node equally (default: one VC 'default')")
    p.add_argument("-o", "--output", default=None, help="write the spec here (default: print it)")
    p.add_argument("--json", action="store_true", help="print the GPUs, notes and spec as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import yaml

    from hived.service.discovery import NoGpuError, discover, virtual_node
    vcs = [v.strip() for v in args.vcs.split(",")] if args.vcs else None
    try:
        if args.gpus is not None:
            d = virtual_node(args.gpus, host=args.host or "virtual0", vcs=vcs)
        else:
            d = discover(host=args.host, vcs=vcs)
    except NoGpuError as exc:
        print(f"hived discover: {exc}", file=sys.stderr)
        return cs.NOT_FOUND
    except ValueError as exc:
        print(f"hived discover: {exc}", file=sys.stderr)
        return cs.BAD_INPUT
    from hived.core.spec import SpecError, load_spec
    try:
        load_spec(d.spec)   # what we write must load
    except SpecError as exc:
        print(f"hived discover: the spec built from this machine does not load ({exc}); "
              f"please report it with 'hived discover --json'", file=sys.stderr)
        return cs.BAD_INPUT
    if args.json:
        cs.print_json(d.to_json())
        return cs.OK
    for note in d.notes:
        print(f"note: {note}", file=sys.stderr)
    header = "".join(f"# {g.index}: {g.model} {g.memory_mib or '?'} MiB {g.uuid or ''} {g.pci_bus_id or ''}\n"
                     for g in d.gpus)
    text = f"# hived discover on {d.host}\n{header}" + "".join(f"# note: {n}\n" for n in d.notes) \
        + yaml.safe_dump(d.spec, sort_keys=False)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        chains = ", ".join(c["cellType"] for c in d.spec["physicalCluster"]["physicalCells"])
        print(f"wrote {args.output}: {len(d.gpus)} GPUs, chains {chains}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return cs.OK
