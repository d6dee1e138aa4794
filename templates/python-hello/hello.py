"""The `hello` registered command.

The daemon passes the validated, coerced arguments as one JSON object on
stdin; what this prints as JSON on stdout is returned to the caller as JSON.
"""

import json
import sys


def main() -> None:
    args = json.load(sys.stdin)
    name = args["name"]
    times = args.get("times", 1)
    print(json.dumps({"greeting": " ".join([f"Hello, {name}!"] * times), "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
