"""Run under torchrun by tests/profile/test_profile_torchrun.py: the profile with one part that
fails on rank 1 only, before it makes any process group (injected here, not in the library)."""

import os
import sys

from distlab.profile import cli

real = cli.get_part
FAIL = os.environ["DISTLAB_TEST_FAIL_PART"]


def get_part(name: str):  # noqa: ANN201 (test shim)
    if name == FAIL and os.environ["RANK"] == "1":
        def fail(ctx):  # noqa: ANN001, ANN202
            raise RuntimeError("rank 1 could not measure (injected failure)")
        return fail
    return real(name)


cli.get_part = get_part
sys.exit(cli.main(sys.argv[1:]))
