"""Run inside the SGLang venv: SGLang's own parser and argument resolution over argument lists from stdin.

Prints `__RESULTS__` and a JSON list, one {"ok": bool, "error": str} per list. Imports nothing from the
harness (the SGLang venv has none); `resolve_once` is what launch_server runs before starting anything.
"""

import json
import sys

from sglang.srt.server_args import prepare_server_args

results = []
for argv in json.loads(sys.stdin.read()):
    try:
        prepare_server_args(argv).resolve_once()
        results.append({"ok": True, "error": ""})
    except SystemExit as e:
        results.append({"ok": False, "error": f"argparse exit {e.code}"})
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
print("__RESULTS__" + json.dumps(results))
