"""A scripted JSON-lines planner for the command adapter's tests.

``fake_planner.py ACTION ...``: for each telemetry line read on stdin it performs the next
action (then ``good`` once the list is used up):
  good       a directive asking lr_multiplier 2.0 (over the policy maximum: it is clamped)
  none       ``{}``
  malformed  a line that is not JSON
  nan        ``{"lr_multiplier": NaN}``
  huge       a 1 MB line
  double     ``{}`` and a second line ``{"lr_multiplier": 0.5}`` in one write (a stray line)
  hang       sleep for a minute without answering
  exit       exit with status 3
"""

from __future__ import annotations

import json
import sys
import time


def act(action: str, step: int) -> None:
    out = sys.stdout
    if action == "good":
        out.write(json.dumps({"lr_multiplier": 2.0, "rationale": f"fake at step {step}"}) + "\n")
    elif action == "none":
        out.write("{}\n")
    elif action == "malformed":
        out.write("this is {not json\n")
    elif action == "nan":
        out.write('{"lr_multiplier": NaN}\n')
    elif action == "huge":
        out.write('{"rationale": "' + "x" * (1 << 20) + '"}\n')
    elif action == "double":
        out.write('{}\n{"lr_multiplier": 0.5, "rationale": "a stray second line"}\n')
    elif action == "hang":
        time.sleep(60)
    elif action == "exit":
        sys.exit(3)
    out.flush()


def main() -> None:
    actions = sys.argv[1:]
    for n, line in enumerate(sys.stdin):
        step = json.loads(line)["step"]
        act(actions[n] if n < len(actions) else "good", step)


if __name__ == "__main__":
    main()
