"""Run inside the SGLang venv: SGLang's own server argument definitions (ServerArgs.add_cli_args on a fresh
parser), one entry per long option: its dest, default, choices and whether it takes a value.

Prints `__ARGS__` and a JSON object. Imports nothing from the harness (the SGLang venv has none).
"""

import argparse
import json

from sglang.srt.server_args import ServerArgs

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = {}
for action in parser._actions:
    default = action.default
    try:
        json.dumps(default)
    except TypeError:
        default = repr(default)
    for option in action.option_strings:
        if option.startswith("--"):
            out[option] = {
                "dest": action.dest,
                "default": default,
                "choices": [str(c) for c in action.choices] if action.choices else None,
                "switch": action.nargs == 0,
            }
print("__ARGS__" + json.dumps(out))
