"""The findings of validate.py: every check reports each result through fail() or ok(), one printed
line each, and failures keeps the FAIL lines for the exit status. It owns no check."""
failures = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")
    print(f"FAIL {where}: {msg}")


def ok(where, msg):
    print(f"ok   {where}: {msg}")
