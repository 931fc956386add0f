#!/usr/bin/env python3
"""Checks of the readyprism Talos system extension (talos/extension/); run by .ci/extension-check.

  extension_check.py sources --readyprism BIN   the files in talos/extension/ as written
  extension_check.py image EXTDIR               an extension image's exported root (manifest.yaml + rootfs/)
  extension_check.py launch --ext EXTDIR --host DIR --out SCRIPT [--config FILE] [--drop-mount DST] [-- ARGS]
                                                a script that runs the service as Talos would, in a chroot
  extension_check.py selftest                   every rule rejects a broken input (extension_selftest.py)

The rules are Talos's own, ported from its source (siderolabs/talos, identical at v1.13.9 and
v1.14.0-rc.1; each cited where it is applied), plus stricter ones marked "stricter": Talos decodes
the manifest and the service spec without rejecting unknown keys, so a misspelt key would be
silently ignored on the node; here it is an error.

Talos's own code (not a port) checks the manifest, the image layout, the service spec and, at
1.13, the ExtensionServiceConfig and the extension patches too: talos/tools/machinery (machinery
v1.13.9), run by .ci/deploy-check. The ports here stay: they cover 1.14, which that tool cannot
build, and the exported image; the rules marked "project's rule" (depends on cri and time, the
mounts, the version) are ours alone: Talos's Spec.Validate requires none of them.
"""
import argparse, json, os, re, shlex, shutil, stat, subprocess, sys, tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validate import ROOT, SCHEMAS, kinds, load_docs, merged, schema_errors  # noqa: E402

EXT = os.path.join(ROOT, "talos", "extension")
NAME = "readyprism"
# The kubelet's certificate directory, which Talos replaces whole: never a mount of its own.
KUBELET_PKI = "/var/lib/kubelet/pki"
# pkg/machinery/constants/constants.go:1186,1189 (v1.14.0-rc.1): where specs and service roots live.
SPEC_DIR = "usr/local/etc/containers"
ROOTFS_DIR = "usr/local/lib/containers"
# pkg/machinery/constants/constants.go:1192 (SystemOverlaysPath + "/extensions"): configFiles' home.
USER_CONFIG_DIR = "system/overlays/extensions"

# pkg/machinery/extensions/extensions.go:11-35: the only paths a file of an extension may have.
ALLOWED_PATHS = [
    "/etc/cri/conf.d", "/usr/lib/firmware", "/usr/lib/modules", "/usr/lib/ld-linux-x86-64.so.2",
    "/usr/lib/ld-linux-aarch64.so.1", "/usr/bin/ldconfig", "/etc/ld.so.conf", "/etc/ld.so.cache",
    "/usr/bin/nvidia-modprobe", "/usr/bin/nvidia-pcc", "/usr/bin/nvidia-smi", "/usr/bin/nvidia-ctk",
    "/usr/bin/nvidia-cdi-hook", "/usr/bin/nvme", "/usr/lib/udev/rules.d", "/usr/local",
    "/usr/share/glvnd", "/usr/share/egl", "/etc/vulkan",
]
# pkg/machinery/extensions/metadata.go:8-37: the manifest's keys.
MANIFEST_KEYS = {"version", "metadata"}
METADATA_KEYS = {"name", "version", "author", "description", "compatibility", "extraInfo"}
# pkg/machinery/extensions/services/services.go:21-84: the service spec's keys; mounts are OCI
# runtime-spec Mounts, whose yaml keys are the lowercased Go field names.
SPEC_KEYS = {"name", "container", "depends", "restart", "logToConsole"}
CONTAINER_KEYS = {"entrypoint", "environment", "environmentFile", "args", "mounts", "security"}
SECURITY_KEYS = {"writeableSysfs", "maskedPaths", "readonlyPaths", "writeableRootfs", "rootfsPropagation"}
DEPENDENCY_KEYS = {"service", "path", "network", "time", "configuration"}
MOUNT_KEYS = {"destination", "type", "source", "options"}
# pkg/machinery/extensions/services/restartkind_enumer.go:35-42,52-60: names, case-insensitive.
RESTART_KINDS = {"always", "never", "untilsuccess"}
# pkg/machinery/nethelpers/status.go:14-17: the network dependency values.
NETWORK_STATUSES = {"addresses", "connectivity", "hostname", "etcfiles"}
# The Talos versions this project ships configs for (talos/schema/).
TALOS_VERSIONS = [(1, 13, 9), (1, 14, 0)]
# siderolabs/extensions-validator cmd/extensions-validator/cmd/validate.go (run on every official
# extension): the manifest's version is semver (or one of a few build forms this project never uses).
SEMVER_RE = re.compile(r"^v?(\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?)$")


def unknown(where, doc, allowed):
    """Stricter: keys Talos's decoder would silently ignore."""
    extra = sorted(set(doc) - allowed) if isinstance(doc, dict) else ["<not a mapping>"]
    return [f"{where}: unknown key(s) {extra}"] if extra else []


def constraint_ok(constraint, version):
    """pkg/machinery/extensions/validate.go:92-126: blang/semver ParseRange after `trim` (drop a `v`
    before a digit), checked against the version's core (no pre-release). Supported here: `||` of
    space-separated comparisons with full x.y.z versions; anything else is an error (stricter)."""
    text = re.sub(r"v(?=\d)", "", constraint)
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
           "<": lambda a, b: a < b, "!=": lambda a, b: a != b, "==": lambda a, b: a == b,
           "=": lambda a, b: a == b, "": lambda a, b: a == b}
    alternatives = []
    for part in text.split("||"):
        terms = re.findall(r"\s*(>=|<=|!=|==|>|<|=)?\s*(\d+)\.(\d+)\.(\d+)\s*", part)
        if not terms or re.sub(r"\s*(>=|<=|!=|==|>|<|=)?\s*\d+\.\d+\.\d+\s*", "", part):
            raise ValueError(f"cannot parse Talos version constraint {constraint!r}")
        alternatives.append(all(ops[op or ""](version, (int(a), int(b), int(c))) for op, a, b, c in terms))
    return any(alternatives)


def manifest_errors(m):
    errs = unknown("manifest.yaml", m, MANIFEST_KEYS)
    # pkg/machinery/extensions/load.go:67-69: only manifest version v1alpha1.
    if not isinstance(m, dict) or m.get("version") != "v1alpha1":
        return errs + [f"manifest.yaml: unsupported manifest version {m.get('version') if isinstance(m, dict) else m!r}"]
    md = m.get("metadata") or {}
    errs += unknown("manifest.yaml metadata", md, METADATA_KEYS)
    # load.go:42-46 rejects a zero manifest; the project requires every field the issue names.
    for key in ("name", "version", "author", "description"):
        if not isinstance(md.get(key), str) or not md.get(key).strip():
            errs.append(f"manifest.yaml: metadata.{key} is missing or empty")
    if md.get("name") != NAME:
        errs.append(f"manifest.yaml: metadata.name is {md.get('name')!r}, not {NAME!r}")
    if not SEMVER_RE.match(str(md.get("version", ""))):
        errs.append(f"manifest.yaml: metadata.version {md.get('version')!r} is not semver")
    compat = md.get("compatibility") or {}
    errs += unknown("manifest.yaml compatibility", compat, {"talos"})
    constraint = ((compat.get("talos") or {}) if isinstance(compat, dict) else {}).get("version", "")
    if not constraint:  # validate.go:95 skips an empty constraint; the project requires one
        errs.append("manifest.yaml: compatibility.talos.version is missing")
    else:
        try:
            for v in TALOS_VERSIONS:  # validate.go:101: must hold for every version we ship for
                if not constraint_ok(constraint, v):
                    errs.append(f"manifest.yaml: constraint {constraint!r} excludes Talos {'.'.join(map(str, v))}")
        except ValueError as e:
            errs.append(f"manifest.yaml: {e}")
    return errs


def spec_errors(spec, where="readyprism.yaml"):
    """pkg/machinery/extensions/services/services.go:88-167 (Spec.Validate), with the stricter key checks."""
    if not isinstance(spec, dict):
        return [f"{where}: not a mapping"]
    errs = unknown(where, spec, SPEC_KEYS)
    if not re.fullmatch(r"[-_a-z0-9]{1,}", str(spec.get("name", ""))):  # services.go:86,92
        errs.append(f"{where}: name {spec.get('name')!r} is invalid")
    if str(spec.get("restart", "")).lower() not in RESTART_KINDS:  # services.go:96
        errs.append(f"{where}: restart kind is invalid: {spec.get('restart')!r}")
    c = spec.get("container") or {}
    errs += unknown(f"{where} container", c, CONTAINER_KEYS)
    errs += unknown(f"{where} container.security", c.get("security") or {}, SECURITY_KEYS)
    if not c.get("entrypoint"):  # services.go:113
        errs.append(f"{where}: container entrypoint can't be empty")
    for i, m in enumerate(c.get("mounts") or []):
        errs += unknown(f"{where} container.mounts[{i}]", m, MOUNT_KEYS)
        # extension.go:173-184 creates a missing source with MkdirAll; the OCI runtime needs an
        # absolute destination.
        for key in ("source", "destination"):
            if not str(m.get(key, "")).startswith("/"):
                errs.append(f"{where}: container.mounts[{i}].{key} {m.get(key)!r} is not absolute")
    for i, dep in enumerate(spec.get("depends") or []):  # services.go:123-166
        errs += unknown(f"{where} depends[{i}]", dep, DEPENDENCY_KEYS)
        if not isinstance(dep, dict):
            continue
        set_ = [k for k in DEPENDENCY_KEYS if dep.get(k)]
        if not set_:
            errs.append(f"{where}: depends[{i}]: no dependency specified")
        if len(set_) > 1:
            errs.append(f"{where}: depends[{i}]: more than a single dependency is set ({sorted(set_)})")
        if dep.get("path") and not str(dep["path"]).startswith("/"):
            errs.append(f"{where}: depends[{i}]: path is not absolute: {dep['path']!r}")
        for st in dep.get("network") or []:
            if st not in NETWORK_STATUSES:
                errs.append(f"{where}: depends[{i}]: invalid network dependency: {st!r}")
    return errs


def esc_errors(doc, where):
    """pkg/machinery/config/types/runtime/extensions/service_config.go:131-157 (Validate)."""
    errs = []
    if not doc.get("name"):
        return [f"{where}: name is required"]
    files, env = doc.get("configFiles") or [], doc.get("environment") or []
    if not files and not env:
        errs.append(f"{where}: no config files found for extension {doc['name']!r}")
    flat = {}
    for f in files:
        if not f.get("content"):
            errs.append(f"{where}: extension content is required for extension {doc['name']!r}")
        if not f.get("mountPath"):
            errs.append(f"{where}: extension mount path is required for extension {doc['name']!r}")
            continue
        # extension_service_config_files.go:89 and extension.go:201: each file is stored under one
        # flattened name, so two mountPaths that flatten alike would share a file (stricter).
        name = f["mountPath"].lstrip("/").replace("/", "-")
        if name in flat:
            errs.append(f"{where}: mountPaths {flat[name]!r} and {f['mountPath']!r} are stored as the same file {name!r}")
        flat[name] = f["mountPath"]
        if not f["mountPath"].startswith("/"):
            errs.append(f"{where}: mountPath {f['mountPath']!r} is not absolute")
    return errs


def covered(path, mounts):
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def fit_errors(spec, esc, cfg):
    """The project's rules: the spec, its ExtensionServiceConfig and the config inside fit together."""
    errs = []
    c = spec.get("container") or {}
    args = c.get("args") or []
    # extension.go:95,195: the config is looked up by the spec's name (and shown as ext-<name>, :48).
    if esc.get("name") != spec.get("name"):
        errs.append(f"ExtensionServiceConfig name {esc.get('name')!r} is not the service's {spec.get('name')!r}")
    paths = [f.get("mountPath") for f in esc.get("configFiles") or []]
    if args[-3:-1] != ["run", "--config"] or args[-1] not in paths:
        errs.append(f"args {args} must end with run --config <a configFiles mountPath {paths}>")
    if str(spec.get("restart")).lower() != "always":
        errs.append("restart must be always (restart.Forever, extension.go:216)")
    deps = [d for d in spec.get("depends") or [] if isinstance(d, dict)]
    if not any(d.get("configuration") for d in deps) or not any(d.get("network") for d in deps):
        errs.append("depends must hold a network and a configuration dependency")
    # v1alpha1_sequencer_tasks.go StopServicesEphemeral (:510-513 at v1.13.9, :446-449 at
    # v1.14.0-rc.1) stops cri and its reverse dependencies before /var is unmounted; a service with
    # /var mounts that does not depend on cri keeps /var busy.
    if not any(d.get("service") == "cri" for d in deps):
        errs.append("depends must hold `service: cri` (stopped before EPHEMERAL is unmounted)")
    if not any(d.get("time") is True for d in deps):  # extension.go:92-93: waits for time sync
        errs.append("depends must hold `time: true` (TLS probes before time sync fail)")
    mounts = {m["destination"]: m for m in c.get("mounts") or [] if isinstance(m, dict) and "destination" in m}
    tls = (cfg or {}).get("tls") or {}
    for key, p in tls.items():
        if p and not covered(p, mounts):
            errs.append(f"config tls.{key} {p} is under no mount")
    cache = ((cfg or {}).get("discovery") or {}).get("cache")
    writable = [d for d, m in mounts.items() if "rw" in (m.get("options") or [])]
    if cache and not covered(cache, writable):
        errs.append(f"config discovery.cache {cache} is under no writable mount")
    for d, m in mounts.items():
        # kubelet_service.go:489 (v1.13.9), :492 (v1.14.0-rc.1): the directory is removed and made anew.
        if covered(d, [KUBELET_PKI]) or covered(str(m.get("source", "")), [KUBELET_PKI]):
            errs.append(f"mount {d} binds {KUBELET_PKI}, which Talos removes and recreates (CA rotation, "
                        "node rename): the mount would keep the removed directory; mount /var/lib/kubelet")
        opts = m.get("options") or []
        if ("ro" in opts) == ("rw" in opts):
            errs.append(f"mount {d}: options must say exactly one of ro, rw")
        if "rw" in opts and not (cache and covered(cache, [d])):
            errs.append(f"mount {d} is writable but holds no path readyprism writes")
    if (c.get("security") or {}).get("writeableRootfs"):
        errs.append("the root filesystem must stay read-only (no writeableRootfs)")
    return errs


def version_errors(manifest, cargo_toml):
    """The project's rule: the extension's version is the binary's (Cargo.toml [package] version)."""
    m = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', cargo_toml, re.M | re.S)
    version = ((manifest or {}).get("metadata") or {}).get("version")
    if not m or m.group(1) != version:
        return [f"manifest.yaml: metadata.version {version!r} is not Cargo.toml's {m.group(1) if m else None!r}"]
    return []


def check_sources(binary):
    manifest = yaml.safe_load(open(os.path.join(EXT, "manifest.yaml")))
    errs = manifest_errors(manifest) + version_errors(manifest, open(os.path.join(ROOT, "Cargo.toml")).read())
    spec = yaml.safe_load(open(os.path.join(EXT, "readyprism.yaml")))
    errs += spec_errors(spec)
    escs = load_docs(os.path.join(EXT, "extension-service-config.yaml"))
    if len(escs) != 1 or escs[0].get("kind") != "ExtensionServiceConfig":
        return errs + ["extension-service-config.yaml must hold one ExtensionServiceConfig document"]
    esc = escs[0]
    for version, schema_file in SCHEMAS.items():  # the document is the same on 1.13 and 1.14
        schema = json.load(open(os.path.join(ROOT, "talos", "schema", schema_file)))
        by_kind = kinds(schema)
        if "ExtensionServiceConfig" not in by_kind:
            errs.append(f"{schema_file} has no ExtensionServiceConfig: wrong schema files?")
            continue
        errs += [f"extension-service-config.yaml ({schema_file}): {e}"
                 for e in schema_errors(schema, by_kind["ExtensionServiceConfig"], esc)]
        for role in ("worker", "controlplane"):
            rel = f"{version}/{role}.yaml"
            for doc in load_docs(os.path.join(EXT, rel)):
                if doc.get("$patch") == "delete":
                    continue
                definition = by_kind.get(doc.get("kind")) if "kind" in doc else "v1alpha1.Config"
                errs += [f"{rel} ({schema_file}): {e}" for e in schema_errors(schema, definition, merged(doc))]
            errs += role_errors(rel, load_docs(os.path.join(EXT, rel)), version, role)
        print(f"ok   ExtensionServiceConfig and the {version} patches checked against {schema_file}")
    errs += esc_errors(esc, "extension-service-config.yaml")
    text = (esc.get("configFiles") or [{}])[0].get("content", "")
    cfg = yaml.safe_load(text) if text else {}
    errs += fit_errors(spec, esc, cfg)
    if "zone" in cfg:
        errs.append("the embedded config is the fleet form: no per-node `zone:` (use `zones:`)")
    if not cfg.get("zones") or not cfg.get("backends"):
        errs.append("the embedded config needs a `zones:` map and a static `backends:` seed list")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        res = subprocess.run([binary, "check", "--skip-node-files", "--config", f.name], capture_output=True, text=True)
        if res.returncode != 0:
            errs.append(f"readyprism check --skip-node-files on the embedded config: {res.stderr.strip()}")
    return errs


def role_errors(rel, docs, version, role):
    """KubePrism off in every patch; only the worker's moves the kubelet to readyprism."""
    lb, errs = "https://127.0.0.1:7445", []
    if version == "v1.13":
        d = docs[0] if docs else {}
        if d.get("machine", {}).get("features", {}).get("kubePrism", {}).get("enabled") is not False:
            errs.append(f"{rel}: machine.features.kubePrism.enabled must be false")
        endpoint = d.get("cluster", {}).get("controlPlane", {}).get("endpoint")
    else:
        if {"apiVersion": "v1alpha1", "kind": "KubePrismConfig", "$patch": "delete"} not in docs:
            errs.append(f"{rel}: lacks the KubePrismConfig `$patch: delete` stub")
        endpoint = next((d.get("endpoint") for d in docs if d.get("kind") == "KubeClusterConfig"), None)
    if (endpoint == lb) != (role == "worker"):
        errs.append(f"{rel}: cluster endpoint {endpoint!r}: {lb} on workers only")
    return errs


def image_errors(ext):
    """An extension as Talos unpacks it (pkg/imager/extensions/extensions.go:42,100-119)."""
    errs, rootfs = [], os.path.join(ext, "rootfs")
    # pkg/machinery/extensions/load.go:29-51: manifest.yaml and rootfs/, nothing else.
    entries = sorted(os.listdir(ext))
    for e in entries:
        if e not in ("manifest.yaml", "rootfs"):
            errs.append(f"/: unexpected file {e!r}")
    if "manifest.yaml" not in entries:
        return errs + ["/: extension manifest is missing"]
    if not os.path.isdir(rootfs):
        return errs + ["/: extension rootfs is missing"]
    errs += manifest_errors(yaml.safe_load(open(os.path.join(ext, "manifest.yaml"))))
    # pkg/machinery/extensions/validate.go:129-173 (validateContents). Talos's world-writable test
    # (:143) reads the mode of a fs.DirEntry's Type(), which carries no permission bits, so it never
    # fires there; it is enforced here with the real mode (stricter).
    for base, dirs, files in os.walk(rootfs):
        for name in [""] + dirs + files if base == rootfs else dirs + files:
            path = os.path.join(base, name)
            item = "/" + os.path.relpath(path, rootfs) if name else "/"
            st = os.lstat(path)
            if stat.S_IMODE(st.st_mode) & 0o002 and not stat.S_ISLNK(st.st_mode):
                errs.append(f"world-writeable files are not allowed: {item!r}")
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                errs.append(f"special files are not allowed: {item!r}")
            elif not stat.S_ISDIR(st.st_mode) and not any(item.startswith(p) for p in ALLOWED_PATHS):
                errs.append(f"path {item!r} is not allowed in extensions")
    # internal/app/machined/pkg/controllers/runtime/extension_service.go:104-130: every *.yaml in
    # /usr/local/etc/containers is a spec, validated, names unique.
    specs = {}
    spec_dir = os.path.join(rootfs, SPEC_DIR)
    for f in sorted(os.listdir(spec_dir)) if os.path.isdir(spec_dir) else []:
        if f.endswith(".yaml"):
            spec = yaml.safe_load(open(os.path.join(spec_dir, f)))
            errs += spec_errors(spec, f"/{SPEC_DIR}/{f}")
            if isinstance(spec, dict) and spec.get("name") in specs:
                errs.append(f"/{SPEC_DIR}/{f}: duplicate service spec {spec.get('name')!r}")
            specs[spec.get("name") if isinstance(spec, dict) else f] = spec
    if NAME not in specs:
        return errs + [f"/{SPEC_DIR}: no service spec named {NAME!r}"]
    # extension.go:54,126: the service's root is /usr/local/lib/containers/<name>; the entrypoint is
    # run inside it (relative to its /).
    root = os.path.join(rootfs, ROOTFS_DIR, NAME)
    entry = os.path.normpath(os.path.join(root, specs[NAME]["container"]["entrypoint"].lstrip("/")))
    if not entry.startswith(root + "/") or not os.path.isfile(entry) or not os.access(entry, os.X_OK):
        errs.append(f"entrypoint {specs[NAME]['container']['entrypoint']!r} is not an executable file in /{ROOTFS_DIR}/{NAME}")
    return errs


def launch_script(ext, host, out, config=None, drop=(), args=None):
    """A bash script that runs the service the way extension.go:167-250 and the containerd runner
    set it up, with bind mounts standing in: the service root read-only (:145), the spec's mounts
    with missing sources created 0700 (:173-184), each configFiles entry written under
    /system/overlays/extensions/<name>/ (extension_service_config_files.go:80-91) and bound read-only
    at its mountPath (extension.go:199-205), the host's /etc/hosts and /etc/resolv.conf
    (runner/containerd/containerd.go:399-400), the environment of the spec and the config (:208),
    the host network. Run it in a private mount namespace (unshare -m)."""
    spec = yaml.safe_load(open(os.path.join(ext, "rootfs", SPEC_DIR, f"{NAME}.yaml")))
    esc = load_docs(os.path.join(EXT, "extension-service-config.yaml"))[0]
    root = os.path.join(ext, "rootfs", ROOTFS_DIR, spec["name"])
    q = shlex.quote
    lines = ["set -euo pipefail", f"mount --bind {q(root)} {q(root)}"]

    def bind(src, dst, ro, is_file=False):
        target = os.path.join(root, dst.lstrip("/"))
        make = f"mkdir -p {q(os.path.dirname(target))} && touch {q(target)}" if is_file else f"mkdir -p {q(target)}"
        lines.append(make)
        lines.append(f"mount --bind {q(src)} {q(target)}")
        if ro:
            lines.append(f"mount -o remount,bind,ro {q(target)}")

    for m in spec["container"].get("mounts") or []:
        if m["destination"] in drop:
            continue
        src = os.path.join(host, m["source"].lstrip("/"))
        if not os.path.exists(src):
            os.makedirs(src, 0o700)
        bind(src, m["destination"], "ro" in (m.get("options") or []))
    store = os.path.join(host, USER_CONFIG_DIR, spec["name"])
    os.makedirs(store, exist_ok=True)
    for f in esc.get("configFiles") or []:
        path = os.path.join(store, f["mountPath"].lstrip("/").replace("/", "-"))
        with open(path, "w") as w:
            w.write(open(config).read() if config else f["content"])
        os.chmod(path, 0o644)
        bind(path, f["mountPath"], True, is_file=True)
    for etc in ("/etc/hosts", "/etc/resolv.conf"):
        bind(os.path.join(host, etc.lstrip("/")), etc, True, is_file=True)
    if not (spec["container"].get("security") or {}).get("writeableRootfs"):
        lines.append(f"mount -o remount,bind,ro {q(root)}")
    env = list(spec["container"].get("environment") or []) + list(esc.get("environment") or [])
    argv = [spec["container"]["entrypoint"]] + (args if args else list(spec["container"].get("args") or []))
    lines.append("exec env -i " + " ".join(q(e) for e in env) + f" {q(shutil.which('chroot') or '/usr/sbin/chroot')} {q(root)} " + " ".join(q(a) for a in argv))
    with open(out, "w") as w:
        w.write("\n".join(lines) + "\n")


def report(errs, what):
    for e in errs:
        print(f"FAIL {what}: {e}")
    print(f"{what}: {len(errs)} failure(s)")
    return 1 if errs else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sources").add_argument("--readyprism", required=True)
    sub.add_parser("image").add_argument("ext")
    la = sub.add_parser("launch")
    la.add_argument("--ext", required=True)
    la.add_argument("--host", required=True)
    la.add_argument("--out", required=True)
    la.add_argument("--config")
    la.add_argument("--drop-mount", action="append", default=[])
    la.add_argument("args", nargs="*")
    sub.add_parser("selftest")
    a = ap.parse_args()
    if a.cmd == "sources":
        return report(check_sources(a.readyprism), "extension sources")
    if a.cmd == "image":
        return report(image_errors(a.ext), f"extension image {a.ext}")
    if a.cmd == "launch":
        launch_script(a.ext, a.host, a.out, a.config, a.drop_mount, a.args)
        return 0
    from extension_selftest import selftest

    return selftest()


if __name__ == "__main__":
    sys.exit(main())
