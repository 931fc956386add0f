"""validate.py's checks of install and recovery: no 1.14-form patch carries `.machine.install`
(check 7), and the recovery patches turn KubePrism back on and give worker kubelets a real
cluster endpoint (check 8). Schema validation of these files is validate.py's; the rules here are
what a schema cannot say."""
import glob, os

from validate_findings import fail, ok

LB = "https://127.0.0.1:7445"


def legacy_install(doc):
    """The `.machine.install` section of a legacy (v1alpha1) document, or None."""
    if "kind" in doc or not isinstance(doc.get("machine"), dict):
        return None
    return doc["machine"].get("install")


def check_install_forms(every, root=None):
    """A 1.14-form config written by `talosctl gen config` holds an UnattendedInstallConfig (its
    `installer.image`), and Talos refuses `.machine.install` beside it
    (pkg/machinery/config/types/runtime/unattended_install.go:190-193, v1.14.0-rc.1): no 1.14
    patch, here or under talos/extension/v1.14/, may carry it."""
    files = {rel: docs for rel, (version, docs) in every.items() if version == "v1.14"}
    if root is not None:
        from validate import load_docs  # late: validate imports this module
        for path in sorted(glob.glob(os.path.join(root, "talos", "extension", "v1.14", "*.yaml"))):
            files[os.path.relpath(path, root)] = load_docs(path)
    bad = [rel for rel, docs in files.items() if any(legacy_install(d) is not None for d in docs)]
    for rel in bad:
        fail(rel, "carries `.machine.install` in a 1.14-form patch: Talos rejects it beside the "
             "UnattendedInstallConfig that `talosctl gen config` writes; set the installer in "
             "UnattendedInstallConfig `installer.image`")
    if not bad:
        ok("1.14-form patches", f"none of {len(files)} carries `.machine.install`")


def kubeprism_on(version, docs):
    if version == "v1.13":
        kp = ((docs[0] if docs else {}).get("machine", {}).get("features", {}) or {}).get("kubePrism") or {}
        return kp.get("enabled") is True and kp.get("port") == 7445
    return any(d.get("kind") == "KubePrismConfig" and "$patch" not in d and d.get("port") == 7445 for d in docs)


def endpoint(version, docs):
    if version == "v1.13":
        return ((docs[0] if docs else {}).get("cluster", {}) or {}).get("controlPlane", {}).get("endpoint")
    return next((d.get("endpoint") for d in docs if d.get("kind") == "KubeClusterConfig"), None)


def check_recovery(every):
    """talos/recovery/<version>/{worker,controlplane}.yaml: KubePrism on 7445 in both; the worker
    patch sets a cluster endpoint that is not readyprism's, the control-plane one sets none."""
    found = 0
    for rel, (version, docs) in sorted(every.items()):
        if not rel.startswith("talos/recovery/"):
            continue
        found += 1
        worker = rel.endswith("/worker.yaml")
        if not kubeprism_on(version, docs):
            fail(rel, "recovery patch must turn KubePrism back on, port 7445")
        e = endpoint(version, docs)
        if worker and (not e or e.startswith(LB)):
            fail(rel, f"worker recovery must set the real cluster endpoint, not {e!r}")
        if not worker and e is not None:
            fail(rel, f"control-plane recovery must leave the cluster endpoint alone (sets {e!r})")
    if found != 4:
        fail("talos/recovery", f"expected 4 recovery patches (two versions, two roles), found {found}")
    else:
        ok("talos/recovery", "4 patches: KubePrism on 7445; workers back on the real endpoint")
