"""Which rank reads which sample: one epoch of torch's ``DistributedSampler`` (or libtorch's).

    python -m distlab.samplers 22 --world-size 4                 # torch's strided split, shuffled
    python -m distlab.samplers 22 --world-size 16 --drop-last    # the tail cut instead of padded
    python -m distlab.samplers 10 --world-size 4 --no-shuffle --layout libtorch

Each rank's indices are printed in the order it reads them; a padded duplicate (an index read
again so that every rank gets as many samples) is marked ``*``; the indices no rank reads (the
tail ``drop_last`` cuts) close the output. Notebook 01 draws the same split and lets you move
every parameter.
"""

from __future__ import annotations

from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import UsageError, run_main

PROG = "python -m distlab.samplers"

__all__ = ["main", "render"]


def render(assignment: object) -> str:
    """The lines the command prints for one :class:`~distlab.samplers.Assignment`.

    Args:
        assignment: the split of one epoch.

    Returns:
        One header line, one line per rank (``rank r (n): i i i*``, ``*`` on padded
        duplicates) and one line on what no rank reads.
    """
    from distlab.samplers.assignment import Assignment

    if not isinstance(assignment, Assignment):
        raise TypeError(f"assignment must be an Assignment, got {type(assignment).__name__}")
    a = assignment
    how = ("neither padded nor dropped" if a.exact else
           "tail dropped" if a.drop_last else "padded to equal shares")
    order = f"shuffled (seed {a.seed}, epoch {a.epoch})" if a.shuffle else "in order"
    lines = [f"{a.length} samples over {a.num_replicas} "
             f"{'rank' if a.num_replicas == 1 else 'ranks'}, {a.layout} layout, {order}, "
             f"{how}"]
    width = len(str(a.num_replicas - 1))
    for rank, (idx, pad) in enumerate(zip(a.per_rank, a.padded, strict=True)):
        cells = " ".join(f"{i}{'*' if p else ''}" for i, p in zip(idx.tolist(), pad.tolist(),
                                                                  strict=True))
        lines.append(f"rank {rank:>{width}} ({idx.size}): {cells or '(nothing)'}")
    if a.num_padded:
        lines.append(f"* {a.num_padded} padded duplicate(s): read twice this epoch")
    if a.num_dropped:
        lines.append(f"no rank reads {a.num_dropped}: {' '.join(map(str, a.dropped.tolist()))}")
    elif a.length:
        lines.append("every sample is read")
    else:
        lines.append("the dataset is empty: no rank reads anything")
    return "\n".join(lines)


def _work(argv: list[str]) -> int:
    from distlab.samplers.assignment import LAYOUTS, assign

    p = options.parser(PROG, __doc__)
    p.add_argument("length", type=options.nonnegative_int, metavar="LENGTH",
                   help="samples in the dataset")
    p.add_argument("-n", "--world-size", type=options.positive_int, default=4,
                   help="ranks (num_replicas)")
    p.add_argument("--layout", choices=LAYOUTS, default="torch",
                   help="torch (strided, DistributedSampler) or libtorch (contiguous blocks)")
    p.add_argument("--drop-last", action="store_true", help="cut the tail instead of padding")
    p.add_argument("--exact", action="store_true",
                   help="neither pad nor drop (distlab's DistributedEvalSampler; torch layout)")
    p.add_argument("--no-shuffle", action="store_true", help="keep the dataset's order")
    p.add_argument("--seed", type=int, default=0, help="torch's seed (libtorch ignores it)")
    p.add_argument("--epoch", type=options.nonnegative_int, default=0,
                   help="the epoch set_epoch was given")
    args = p.parse_args(argv)
    try:
        split = assign(args.length, args.world_size, layout=args.layout,
                       shuffle=not args.no_shuffle, seed=args.seed, epoch=args.epoch,
                       drop_last=args.drop_last, exact=args.exact)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(render(split))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status (see the module docstring)."""
    return run_main(PROG, _work, argv)


if __name__ == "__main__":
    raise SystemExit(main())
