"""``hived kernelspec``: install, list and remove Jupyter kernelspecs whose kernel is a
hived TE job (docs/kernels.md)."""
from __future__ import annotations

import sys

from hived.cli import support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("kernelspec", help=summary,
                              description="Jupyter kernels that run as TE jobs of a VC: starting one queues "
                                          "a job, the kernel gets its GPUs, shutting it down ends the job.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    i = sub.add_parser("install", help="write a kernelspec for a VC and a GPU count")
    i.add_argument("--vc", required=True, help="the VC the kernel's jobs go to")
    i.add_argument("--gpus", type=int, required=True, help="GPUs of each kernel")
    i.add_argument("--name", default=None, help="kernelspec name (default hived-<vc>-<n>gpu)")
    i.add_argument("--display-name", default=None,
                   help='what Jupyter shows (default "Python 3 (hived: <vc>, <n> GPUs)")')
    i.add_argument("--start-timeout", type=float, default=None,
                   help="seconds a start may wait in the queue before it fails (default 300)")
    where = i.add_mutually_exclusive_group()
    where.add_argument("--prefix", default=None, help="install under PREFIX/share/jupyter/kernels")
    where.add_argument("--user", action="store_true", help="install for the current user only")
    where.add_argument("--sys-prefix", action="store_true", help="install into this Python's prefix")
    i.set_defaults(func=_install)
    ls = sub.add_parser("list", help="the hived kernelspecs Jupyter finds")
    ls.add_argument("--prefix", default=None, help="also look under PREFIX/share/jupyter/kernels")
    ls.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    ls.set_defaults(func=_list)
    rm = sub.add_parser("remove", help="remove hived kernelspecs")
    rm.add_argument("names", nargs="+", metavar="NAME")
    rm.add_argument("--prefix", default=None, help="also look under PREFIX/share/jupyter/kernels")
    rm.set_defaults(func=_remove)


def _install(args) -> int:
    from hived.kernels import kernelspecs as ks
    prefix = sys.prefix if args.sys_prefix else args.prefix
    try:
        path = ks.install(args.vc, args.gpus, args.name, args.display_name, prefix=prefix, user=args.user,
                          start_timeout=args.start_timeout)
    except ks.KernelspecError as exc:
        print(f"hived kernelspec install: {exc}", file=sys.stderr)
        return cs.BAD_INPUT
    except OSError as exc:
        print(f"hived kernelspec install: cannot write the kernelspec: {exc}", file=sys.stderr)
        return cs.NOT_ALLOWED
    print(f"installed kernelspec {path.name} in {path} (VC {args.vc}, {args.gpus} GPU"
          f"{'' if args.gpus == 1 else 's'})")
    return cs.OK


def _list(args) -> int:
    from hived.kernels import kernelspecs as ks
    specs = ks.installed(args.prefix)
    if args.json:
        cs.print_json({"kernelspecs": specs})
    elif not specs:
        print("no hived kernelspecs (install one with 'hived kernelspec install --vc VC --gpus N')")
    else:
        print(cs.table([[s["name"], s["vc"], s["gpus"], s["display_name"], s["path"]] for s in specs],
                       ["NAME", "VC", "GPUS", "DISPLAY NAME", "PATH"]))
    return cs.OK


def _remove(args) -> int:
    from hived.kernels import kernelspecs as ks
    worst = cs.OK
    for name in args.names:
        try:
            print(f"removed {ks.remove(name, args.prefix)}")
        except ks.KernelspecError as exc:
            print(f"hived kernelspec remove: {exc}", file=sys.stderr)
            worst = cs.NOT_FOUND
        except OSError as exc:
            print(f"hived kernelspec remove: {name}: {exc}", file=sys.stderr)
            worst = max(worst, cs.NOT_ALLOWED)
    return worst
