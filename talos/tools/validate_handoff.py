"""validate.py's check 9: every control-plane patch (static pod and extension, 1.13 and 1.14
forms) gives kube-apiserver a `--shutdown-delay-duration` longer than a hand-off needs, and no
worker patch sets kube-apiserver arguments.

A hand-off needs `handoff_window` + one probe interval at its longest (`health.interval` + 10 %
jitter: the `[-]shutdown` answer is seen at the next probe) + the probe timeout; the embedded
config's values (defaults 5s, 5s, 3s) give 13.5 s, so the patches set 15s. Talos sets no
`--shutdown-delay-duration` of its own (talos/README.md, "The apiserver's shutdown window").

Where the argument goes, by config form:
- legacy (v1alpha1, `talos/v1.13/`): `cluster.apiServer.extraArgs`;
- 1.14 multi-document (`talos/v1.14/`): a `KubeAPIServerConfig` document with `extraArgs` only,
  merged into the one `talosctl gen config` writes (pkg/machinery/config/configpatcher/
  strategic.go:27,52-57, v1.14.0-rc.1). No `image` in it: the patch would pin the Kubernetes
  version. No legacy `cluster.apiServer` in a 1.14 form: Talos refuses it beside a
  KubeAPIServerConfig (pkg/machinery/config/types/k8s/apiserver.go:192-196, v1.14.0-rc.1).
KubeAPIServerConfig is a control-plane-only document (apiserver.go:46;
pkg/machinery/config/container/validate.go:298-312, v1.14.0-rc.1): a worker patch with it is refused.
"""
import os, re

import yaml

from validate_findings import fail, ok

FLAG = "shutdown-delay-duration"
DEFAULTS = {"handoff_window": "5s", "interval": "5s", "timeout": "3s"}
JITTER = 0.10
CONTROL_PLANE = {"talos/v1.13/controlplane.yaml": "v1.13", "talos/extension/v1.13/controlplane.yaml": "v1.13",
                 "talos/v1.14/controlplane.yaml": "v1.14", "talos/extension/v1.14/controlplane.yaml": "v1.14"}
WORKER = {"talos/v1.13/worker.yaml": "v1.13", "talos/extension/v1.13/worker.yaml": "v1.13",
          "talos/v1.14/worker.yaml": "v1.14", "talos/extension/v1.14/worker.yaml": "v1.14"}


def seconds(text):
    """A readyprism or Go duration of one unit (`250ms`, `5s`, `1m`) in seconds, or None."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", str(text).strip())
    if not m:
        return None
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m.group(2)]


def needed(cfg):
    """handoff_window + health.interval (+ jitter) + health.timeout of a readyprism config."""
    health = cfg.get("health") or {}
    handoff = seconds(cfg.get("handoff_window", DEFAULTS["handoff_window"]))
    interval = seconds(health.get("interval", DEFAULTS["interval"]))
    timeout = seconds(health.get("timeout", DEFAULTS["timeout"]))
    return handoff + interval * (1 + JITTER) + timeout


def apiserver_args(version, docs):
    """[(where, extraArgs)] of every kube-apiserver setting in a patch; legacy and typed."""
    out = []
    for i, d in enumerate(docs):
        legacy = ((d.get("cluster") or {}).get("apiServer")) if "kind" not in d else None
        if legacy is not None:
            out.append(("cluster.apiServer", legacy.get("extraArgs") or {}, legacy))
        if d.get("kind") == "KubeAPIServerConfig":
            out.append((f"KubeAPIServerConfig (document {i + 1})", d.get("extraArgs") or {}, d))
    return out


def check_shutdown_delay(root, config_text):
    from validate import load_docs  # late: validate imports this module
    cfg = yaml.safe_load(config_text) or {}
    need = needed(cfg)
    good = 0
    for rel, version in CONTROL_PLANE.items():
        found = apiserver_args(version, load_docs(os.path.join(root, rel)))
        if version == "v1.14" and any(w == "cluster.apiServer" for w, _, _ in found):
            fail(rel, "legacy cluster.apiServer in a 1.14-form patch: Talos refuses it beside the "
                 "KubeAPIServerConfig `talosctl gen config` writes; use a KubeAPIServerConfig document")
            continue
        if version == "v1.13" and any(w != "cluster.apiServer" for w, _, _ in found):
            fail(rel, "KubeAPIServerConfig in a 1.13-form patch: use cluster.apiServer.extraArgs")
            continue
        delays = [(w, a.get(FLAG), d) for w, a, d in found if FLAG in a]
        if not delays:
            fail(rel, f"sets no kube-apiserver {FLAG}: with Talos's default an apiserver restart "
                 f"gives readyprism no hand-off window (needs more than {need:g}s)")
            continue
        where, value, doc = delays[-1]
        if "image" in doc:
            fail(rel, f"{where} sets `image`: the patch would pin kube-apiserver's version; leave it to the base config")
            continue
        s = seconds(value)
        if s is None or s <= need:
            fail(rel, f"{where} {FLAG} {value!r} is not longer than handoff_window + health.interval "
                 f"(+{JITTER:.0%} jitter) + health.timeout = {need:g}s")
            continue
        good += 1
    for rel, version in WORKER.items():
        if apiserver_args(version, load_docs(os.path.join(root, rel))):
            fail(rel, "a worker patch sets kube-apiserver arguments (KubeAPIServerConfig is refused on "
                 "workers; the control-plane patches carry them)")
            good = -len(CONTROL_PLANE)
    if good == len(CONTROL_PLANE):
        ok("control-plane patches", f"all {good} set kube-apiserver {FLAG} longer than {need:g}s "
           "(handoff_window + health.interval + 10 % + health.timeout); no worker patch sets it")
