"""What every distlab command shares: option types that check values while argparse parses them
(:mod:`.options`) and :func:`~.run.run_main`, which turns bad input into one line and exit 2 and
Ctrl-C into one line and exit 130 (:mod:`.run`). Core floor: imports no distlab package."""
