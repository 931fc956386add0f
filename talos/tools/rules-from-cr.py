#!/usr/bin/env python3
"""Writes talos/alerts/readyprism.rules.yaml (bare rule groups) from the PrometheusRule in
talos/alerts/readyprism-rules.yaml, the source. --check: exit 1 if the file is out of date."""
import os, sys, yaml

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "alerts")
HEADER = """# readyprism alerts as a bare Prometheus rule file (rule_files:), generated from the
# PrometheusRule in readyprism-rules.yaml (the source, with comments): edit that one, then run
# talos/tools/rules-from-cr.py. .ci/deploy-check fails when this file is out of date.
"""

def render():
    cr = yaml.safe_load(open(os.path.join(here, "readyprism-rules.yaml")))
    assert cr["kind"] == "PrometheusRule", cr["kind"]
    return HEADER + yaml.safe_dump({"groups": cr["spec"]["groups"]}, sort_keys=False, width=100)

def main():
    out = os.path.join(here, "readyprism.rules.yaml")
    text = render()
    if "--check" in sys.argv[1:]:
        if not os.path.exists(out) or open(out).read() != text:
            print(f"{out} is out of date: run talos/tools/rules-from-cr.py", file=sys.stderr)
            return 1
        return 0
    open(out, "w").write(text)
    return 0

if __name__ == "__main__":
    sys.exit(main())
