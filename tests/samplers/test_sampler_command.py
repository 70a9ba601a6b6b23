"""``python -m distlab.samplers``: each rank's indices as torch's DistributedSampler gives them."""

from __future__ import annotations

import pytest
import torch.utils.data as tud

from distlab.samplers.__main__ import main


def _ranks(out: str) -> list[list[int]]:
    """Each ``rank r (n): ...`` line's indices, the padded mark taken off."""
    return [[int(c.rstrip("*")) for c in line.split(": ", 1)[1].split() if c != "(nothing)"]
            for line in out.splitlines() if line.startswith("rank")]


@pytest.mark.parametrize(("length", "world", "drop_last", "shuffle"),
                         [(22, 4, False, True), (22, 16, True, True), (10, 3, False, False),
                          (3, 5, False, True), (0, 2, True, True)])
def test_each_rank_reads_what_torch_gives_it(length: int, world: int, drop_last: bool,
                                             shuffle: bool, capsys) -> None:
    argv = [str(length), "--world-size", str(world)] + ["--drop-last"] * drop_last \
        + ["--no-shuffle"] * (not shuffle)
    assert main(argv) == 0
    out = capsys.readouterr().out
    torch_ranks = [list(tud.DistributedSampler(range(length), num_replicas=world, rank=r,
                                               shuffle=shuffle, drop_last=drop_last))
                   for r in range(world)]
    assert _ranks(out) == torch_ranks
    read = {i for r in torch_ranks for i in r}
    last = out.splitlines()[-1]
    if length == 0:
        assert last.startswith("the dataset is empty")
    elif read == set(range(length)):
        assert last == "every sample is read"
    else:
        assert last == "no rank reads " + f"{length - len(read)}: " + \
            " ".join(map(str, sorted(set(range(length)) - read)))


def test_padded_duplicates_are_marked(capsys) -> None:
    assert main(["5", "-n", "4", "--no-shuffle"]) == 0
    out = capsys.readouterr().out
    assert "rank 1 (2): 1 0*" in out and "* 3 padded duplicate(s)" in out


def test_a_bad_split_is_one_line(capsys) -> None:
    assert main(["10", "--exact", "--drop-last"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m distlab.samplers: error: exact=True") and \
        line.endswith("(see --help)")
