#!/usr/bin/env python3
"""lm_eval's own command line with the "moerun" model type registered (moerun_lm.py, next to this file):
takes every lm_eval option, e.g.
    lm_eval_moerun.py --model moerun --model_args model=DIR --tasks TASK --include_path TASKS_DIR

usage: lm_eval_moerun.py LM_EVAL_OPTIONS...
"""
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # the docstring is the usage; nothing runs
    print(__doc__)
    sys.exit(0)
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moerun_lm  # noqa: E402,F401  (registers the model type)
from lm_eval.__main__ import cli_evaluate  # noqa: E402

if __name__ == "__main__":
    cli_evaluate()
