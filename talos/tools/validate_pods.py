"""validate.py's static pod checks (its check 3): a pod against the strict Kubernetes Pod schema,
its required fields, and the mounts that cover every path its config names (check_pod), and the
form in which the pods of all patches must be equal (normalized). It does not find the pods in
the patches or check their configs (validate.py)."""
import copy, re

from validate_findings import fail, ok

CONFIG_IN_POD = "/etc/readyprism/config.yaml"
CACHE_DIR = "/var/lib/readyprism"
# The kubelet's certificate directory, which Talos replaces whole: never a mount of its own.
KUBELET_PKI = "/var/lib/kubelet/pki"


def covered(path, mounts):
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def check_pod(where, pod, cfg, host_dir):
    import kubernetes_validate
    try:
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
        ok(where, f"valid Kubernetes Pod (strict schema, {kubernetes_validate.latest_version()})")
    except kubernetes_validate.ValidationError as e:
        fail(where, f"not a valid Pod: {e.message}")
    spec, meta = pod.get("spec", {}), pod.get("metadata", {})
    c = (spec.get("containers") or [{}])[0]
    sc = c.get("securityContext", {})
    req = [
        (pod.get("apiVersion") == "v1" and pod.get("kind") == "Pod", "apiVersion v1, kind Pod"),
        (meta.get("namespace") == "kube-system", "metadata.namespace kube-system"),
        (spec.get("hostNetwork") is True, "spec.hostNetwork true"),
        (spec.get("priorityClassName") == "system-node-critical", "priorityClassName system-node-critical"),
        (len(spec.get("containers", [])) == 1, "exactly one container"),
        (re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", c.get("image", "")) is not None, "image pinned by @sha256 digest"),
        ("--log-format" in c.get("args", []) and c["args"][c["args"].index("--log-format") + 1] == "json", "--log-format json"),
        (c.get("args", [])[-3:] == ["run", "--config", CONFIG_IN_POD], f"args end with run --config {CONFIG_IN_POD}"),
        (c.get("livenessProbe", {}).get("httpGet") == {"host": "127.0.0.1", "port": 7446, "path": "/livez"}, "liveness GET 127.0.0.1:7446/livez"),
        (c.get("readinessProbe", {}).get("httpGet") == {"host": "127.0.0.1", "port": 7446, "path": "/readyz"}, "readiness GET 127.0.0.1:7446/readyz"),
        (all(k in c.get("resources", {}).get("requests", {}) for k in ("cpu", "memory")), "cpu and memory requests"),
        ("memory" in c.get("resources", {}).get("limits", {}), "memory limit"),
        (sc.get("runAsUser") == 0, "runAsUser 0"),
        (sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation false"),
        (sc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities drop ALL"),
        (not sc.get("capabilities", {}).get("add"), "no capabilities added"),
        (sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem true"),
        (sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "seccompProfile RuntimeDefault"),
        (not sc.get("privileged"), "not privileged"),
        (all(m.get("readOnly") is (m["mountPath"] != CACHE_DIR) for m in c.get("volumeMounts", [])),
         f"every volumeMount readOnly but {CACHE_DIR} (readOnly: false)"),
        (not [m for m in c.get("volumeMounts", []) if "mountPropagation" in m],
         "no mountPropagation (a directory mount sees renamed files; containerd may refuse it)"),
        (all(set(v) == {"name", "hostPath"} for v in spec.get("volumes", [])), "only hostPath volumes"),
    ]
    if cfg is not None:
        admin = cfg.get("admin", "127.0.0.1:7446")
        req.append((admin.endswith(":7446"), f"config admin {admin} on the probes' port 7446"))
    missing = [what for good, what in req if not good]
    for what in missing:
        fail(where, f"static pod lacks: {what}")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    host = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    need = [CONFIG_IN_POD] + ([p for p in (cfg or {}).get("tls", {}).values() if p])
    cache = ((cfg or {}).get("discovery") or {}).get("cache")
    if cache:
        need.append(cache)
        if mounts.get(CACHE_DIR) is None or host.get(mounts[CACHE_DIR]) != CACHE_DIR:
            fail(where, f"the discovery cache {cache} needs {CACHE_DIR} mounted from the same host path")
    for p in need:
        if not covered(p, mounts):
            fail(where, f"{p} is not under any volumeMount")
    if mounts.get("/etc/readyprism") and host.get(mounts["/etc/readyprism"]) != host_dir:
        fail(where, f"config volume is {host.get(mounts['/etc/readyprism'])}, the config is written to {host_dir}")
    for mp, name in mounts.items():  # mounted at the same path as on the host, so config paths hold
        if host.get(name) != mp and not (mp == "/etc/readyprism"):
            fail(where, f"volume {name} is mounted at {mp} but is {host.get(name)} on the host")
    for name, path in host.items():  # kubelet_service.go:489 (v1.13.9), :492 (v1.14.0-rc.1): RemoveAll
        if covered(path, [KUBELET_PKI]):
            fail(where, f"volume {name} mounts {path}: Talos removes and recreates {KUBELET_PKI} "
                 "(CA rotation, node rename) and the mount keeps the removed one; mount /var/lib/kubelet")
    if not missing:
        ok(where, f"static pod has the {len(req)} required fields; mounts cover {', '.join(need)}")


def normalized(pod):
    """The pod without what may differ between the forms: the config directory's host path and
    hostPath `type`."""
    p = copy.deepcopy(pod)
    for v in p["spec"].get("volumes", []):
        v["hostPath"].pop("type", None)
        if v["name"] == "config":
            v["hostPath"]["path"] = "<config dir>"
    return p
