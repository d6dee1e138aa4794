"""Schemathesis hooks of the contract run (loaded through ``SCHEMATHESIS_HOOKS``).

A command that outlives its ``timeout`` answers 500 ``TimeoutError``, as the
reference server does and its client expects (tests/process.rs covers it),
so the fuzzer's tiny timeouts on the exec endpoints are raised to two
seconds, far more than the harmless commands the policy lets it run need.
Every other generated value goes out as generated.
"""

from __future__ import annotations

import schemathesis

EXEC_PATHS = {"/shell", "/shell/stream", "/process/start"}
MIN_TIMEOUT = 2.0


def _seconds(value):
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path not in EXEC_PATHS or not isinstance(case.body, dict) or "timeout" not in case.body:
        return
    seconds = _seconds(case.body["timeout"])
    if seconds is not None and not seconds >= MIN_TIMEOUT:
        case.body["timeout"] = MIN_TIMEOUT
