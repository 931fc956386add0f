#!/usr/bin/env python3
"""Offline checks of the deployment files; run by .ci/deploy-check.

  validate.py --readyprism PATH/TO/readyprism

1. Every Talos 1.14 patch document validates against the Talos JSON schema of its version
   (talos/schema/): legacy documents (machine:/cluster:) against #/$defs/v1alpha1.Config, typed
   documents against the definition whose `kind` matches; `$patch: delete` stubs are checked for
   shape only. The legacy worker patch must fail the 1.14 schema (which rejects the deprecated
   fields), so a mixed-up schema cannot pass silently. The 1.13 patches are not schema-checked
   here: Talos's own code does more (talos/tools/machinery, machinery v1.13.9: `talosctl gen
   config` + the patch + `talosctl validate --mode metal --strict`, run by .ci/deploy-check).
   Everything else in this file is ours, stricter than Talos: Talos does not check what the
   patches say (KubePrism off, the embedded readyprism config, the pods' mounts, the README).
2. The readyprism config embedded in each patch, and the kubeadm one, pass `readyprism check
   --skip-node-files` as written (the cluster CA and kubelet certificate exist only on a node), and
   `readyprism check` with those paths pointed at generated stand-ins; all of them resolve to the
   same config. It is one config for the whole cluster: a `zones` map holding every IP backend,
   no node `zone`, discovery on with its cache set, the status file (if any) on the writable
   mount. The SELinux variant (v1.14 + selinux-ca.yaml,
   `tls.ca` moved into /etc/readyprism) passes the same checks.
3. Each static pod (3 Talos forms + kubeadm) is a valid Kubernetes Pod (strict schema,
   kubernetes-validate), carries the required fields, mounts every path its config names (the
   discovery cache's directory read-write, everything else read-only, no mountPropagation), and
   is the same pod as the others but for the config directory; worker and control-plane patches
   differ only in the worker's cluster endpoint.
4. The alert rules and the dashboard use only metric names and labels that docs/metrics.md lists.
5. No per-zone copies: the old per-zone marker comment appears in no file under talos/ or .ci/.
7. The scraping advice (talos/scraping/): admin.yaml merged into the v1.14 config passes
   `readyprism check` and is refused without `allow_remote_admin`; talos/README.md shows the same
   keys; admin-firewall.yaml validates against both Talos schemas and selects TCP 7446 from at
   least one subnet; the PodMonitor selects the `admin` port and relabels `instance` from the
   node name.
8. Every alert has a `runbook_url` whose anchor is a `## <alert>` section of docs/runbooks.md.
6. talos/README.md never advises `get staticpodstatus` except for control-plane nodes (Talos
   collects it only there), tells to check `kubeprismstatuses`, and does not send readers to
   /system/etc (gone in 1.14).

7. No 1.14-form patch (here or in talos/extension/v1.14/) carries `.machine.install`.
8. The recovery patches (talos/recovery/) turn KubePrism back on and, on workers, set the real
   cluster endpoint.
9. Every control-plane patch sets kube-apiserver's `shutdown-delay-duration` longer than the
   embedded config's handoff_window + health.interval (+10 %) + health.timeout, in the place its
   config form takes it (validate_handoff.py); no worker patch sets it.
10. The 1.14 schema names the install document as Talos decodes it (`UnattendedInstallConfig`,
   talos/schema/README.md), and a document as `talosctl gen config` writes it validates.

Check 3's pod rules live in validate_pods.py, checks 7 and 8 in validate_install.py; fail(), ok() and the failure list in
validate_findings.py (siblings: run by path, this file's directory is on sys.path).
"""
import argparse, copy, ipaddress, json, os, re, subprocess, sys, tempfile

import jsonschema
import yaml

from validate_findings import failures, fail, ok
from validate_handoff import check_shutdown_delay
from validate_install import check_install_forms, check_recovery
from validate_pods import CACHE_DIR, check_pod, normalized

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TALOS = os.path.join(ROOT, "talos")
SCHEMAS = {"v1.13": "v1.13.9.config.schema.json", "v1.14": "v1.14.0-rc.1.config.schema.json"}
# Lines whose patches Talos's own config code checks (talos/tools/machinery, run by .ci/deploy-check:
# gen config + patch + validate --mode metal --strict, stricter than the schema): their schema step
# is not repeated here. v1.14 is checked by machinery v1.14.1 too (talos/tools/machinery-v1.14, two
# dependencies replaced) and keeps its schema step here.
CHECKED_BY_TALOS = {"v1.13": "machinery v1.13.9"}
# Other patches of each config form, under talos/ (schema-checked here; the SELinux variant is
# built in main(), the recovery patches' content is checked by validate_install.py).
EXTRA_PATCHES = {
    "v1.13": ["recovery/v1.13/worker", "recovery/v1.13/controlplane"],
    "v1.14": ["v1.14/selinux-ca", "recovery/v1.14/worker", "recovery/v1.14/controlplane"],
}
# Patch documents of a kind `talosctl gen config` already writes are merged into that document
# (pkg/machinery/config/configpatcher/strategic.go:27,52-57, v1.14.0-rc.1): what the schema
# requires and the patch leaves to the base comes from it. So such a patch document is checked
# merged onto a stand-in of the generated one (pkg/machinery/config/generate/kubernetes.go:98-99,
# v1.14.0-rc.1: image registry.k8s.io/kube-apiserver:v<Kubernetes version>).
GENERATED_BASE = {"KubeAPIServerConfig": {"apiVersion": "v1alpha1", "kind": "KubeAPIServerConfig",
                                          "image": "registry.k8s.io/kube-apiserver:v1.37.0"}}
NODE_CA, SELINUX_CA = "/etc/kubernetes/pki/ca.crt", "/etc/readyprism/ca.crt"
# The per-zone marker of the old layout, spelled in two parts so this file does not carry it.
ZONE_MARKER = "readyprism-" + "node-zone"


def octal_to_int(node):
    """Talos reads YAML 1.2, where 0o644 is an integer; PyYAML (1.1) reads a string."""
    if isinstance(node, dict):
        return {k: octal_to_int(v) for k, v in node.items()}
    if isinstance(node, list):
        return [octal_to_int(v) for v in node]
    if isinstance(node, str) and re.fullmatch(r"0o[0-7]+", node):
        return int(node[2:], 8)
    return node


def load_docs(path):
    with open(path) as f:
        return [octal_to_int(d) for d in yaml.safe_load_all(f) if d is not None]


def validator(schema, definition):
    root = {"$schema": schema.get("$schema", "https://json-schema.org/draft/2020-12/schema"),
            "$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    cls = jsonschema.validators.validator_for(root)
    return cls(root)


def kinds(schema):
    out = {}
    for name, d in schema["$defs"].items():
        enum = d.get("properties", {}).get("kind", {}).get("enum")
        if enum and len(enum) == 1:
            out[enum[0]] = name
    return out


def merged(doc):
    """doc merged onto the generated document of its kind (GENERATED_BASE), maps key by key."""
    base = GENERATED_BASE.get(doc.get("kind"))
    if base is None:
        return doc
    out = copy.deepcopy(base)
    for k, v in doc.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def schema_errors(schema, definition, doc):
    errs = sorted(validator(schema, definition).iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<doc>'}: {e.message[:200]}" for e in errs]


def check_patch_schemas():
    """Returns ({file: [documents]} for the role patches, {file: (version, [documents])} for every
    patch checked)."""
    patches, every = {}, {}
    for version, schema_file in SCHEMAS.items():
        schema = json.load(open(os.path.join(TALOS, "schema", schema_file)))
        by_kind = kinds(schema)
        roles = [f"{version}/worker", f"{version}/controlplane"]
        for name in roles + EXTRA_PATCHES.get(version, []):
            rel = f"talos/{name}.yaml"
            docs = load_docs(os.path.join(ROOT, rel))
            every[rel] = (version, docs)
            if name in roles:
                patches[rel] = docs
            if version in CHECKED_BY_TALOS:
                ok(rel, f"schema step left to Talos's own code ({CHECKED_BY_TALOS[version]}, talos/tools/machinery)")
                continue
            for i, doc in enumerate(docs):
                where = f"{rel} document {i + 1}"
                if doc.get("$patch") == "delete":
                    extra = set(doc) - {"apiVersion", "kind", "name", "$patch"}
                    if extra or doc.get("kind") not in by_kind:
                        fail(where, f"delete stub must name a known kind and nothing else (extra: {sorted(extra)})")
                    else:
                        ok(where, f"$patch: delete of {doc['kind']} (stub, not schema-checked)")
                    continue
                definition = by_kind.get(doc["kind"]) if "kind" in doc else "v1alpha1.Config"
                if definition is None:
                    fail(where, f"kind {doc['kind']!r} is not in the {version} schema")
                    continue
                errs = schema_errors(schema, definition, merged(doc))
                onto = " (merged onto gen config's document)" if doc.get("kind") in GENERATED_BASE else ""
                for e in errs:
                    fail(where, f"{schema_file} #/$defs/{definition}{onto}: {e}")
                if not errs:
                    ok(where, f"valid against {schema_file} #/$defs/{definition}{onto}")
    # The 1.14 schema must reject the legacy fields this project relies on for <= 1.13.
    schema14 = json.load(open(os.path.join(TALOS, "schema", SCHEMAS["v1.14"])))
    legacy = patches["talos/v1.13/worker.yaml"][0]
    if schema_errors(schema14, "v1alpha1.Config", legacy):
        ok("talos/v1.13/worker.yaml", "rejected by the 1.14 schema, as expected (deprecated fields)")
    else:
        fail("talos/v1.13/worker.yaml", "the 1.14 schema accepts it: wrong schema files?")
    check_install_kind(schema14)
    return patches, every


def check_install_kind(schema14):
    """Talos decodes the install document as `UnattendedInstallConfig`
    (pkg/machinery/config/types/runtime/unattended_install.go:24,27, v1.14.0-rc.1); the schema it
    ships at v1.14.0-rc.1 names it `UnattendedInstall` (the type's `schemaMeta`, :50), and our copy
    is corrected (talos/schema/README.md). A fresh copy of the upstream file fails here."""
    by_kind = kinds(schema14)
    where = f"talos/schema/{SCHEMAS['v1.14']}"
    doc = {"apiVersion": "v1alpha1", "kind": "UnattendedInstallConfig",
           "installer": {"image": "registry.example.com/talos-installer:v1.14.0"}}
    if "UnattendedInstall" in by_kind or "UnattendedInstallConfig" not in by_kind:
        fail(where, "names the install document `UnattendedInstall`; Talos decodes only "
             "`UnattendedInstallConfig` (talos/schema/README.md)")
    elif schema_errors(schema14, by_kind["UnattendedInstallConfig"], doc):
        fail(where, "rejects an UnattendedInstallConfig as `talosctl gen config` writes it")
    else:
        ok(where, "names the install document UnattendedInstallConfig, as Talos decodes it")


def check_patch_roles(patches):
    """KubePrism off everywhere; only worker patches move the kubelet; otherwise the same."""
    lb = "https://127.0.0.1:7445"
    for role in ("worker", "controlplane"):
        rel = f"talos/v1.13/{role}.yaml"
        doc = patches[rel][0]
        if doc.get("machine", {}).get("features", {}).get("kubePrism", {}).get("enabled") is not False:
            fail(rel, "machine.features.kubePrism.enabled must be false")
        endpoint = doc.get("cluster", {}).get("controlPlane", {}).get("endpoint")
        if (endpoint == lb) != (role == "worker"):
            fail(rel, f"cluster.controlPlane.endpoint is {endpoint!r}: {lb} on workers only")
        rel = f"talos/v1.14/{role}.yaml"
        docs = patches[rel]
        if {"apiVersion": "v1alpha1", "kind": "KubePrismConfig", "$patch": "delete"} not in docs:
            fail(rel, "lacks the KubePrismConfig `$patch: delete` stub")
        endpoints = [d.get("endpoint") for d in docs if d.get("kind") == "KubeClusterConfig"]
        if endpoints != ([lb] if role == "worker" else []):
            fail(rel, f"KubeClusterConfig endpoints {endpoints}: one, {lb}, on workers only")
    # Beyond the endpoint, the control-plane patches add kube-apiserver's shutdown delay
    # (validate_handoff.py): cluster.apiServer (1.13 form), a KubeAPIServerConfig (1.14 form).
    w13, c13 = copy.deepcopy(patches["talos/v1.13/worker.yaml"]), copy.deepcopy(patches["talos/v1.13/controlplane.yaml"])
    w13[0].pop("cluster", None)
    c13[0].pop("cluster", None)
    w14 = [d for d in patches["talos/v1.14/worker.yaml"] if d.get("kind") != "KubeClusterConfig"]
    c14 = [d for d in patches["talos/v1.14/controlplane.yaml"] if d.get("kind") != "KubeAPIServerConfig"]
    same13, same14 = w13 == c13, w14 == c14
    for v, same in (("v1.13", same13), ("v1.14", same14)):
        if not same:
            fail(f"talos/{v}", "worker and control-plane patches differ beyond the cluster endpoint "
                 "and the apiserver's shutdown delay")
    if same13 and same14:
        ok("talos/v1.1[34]", "KubePrism off in all four; worker + apiserver shutdown delay = control "
           "plane + endpoint 127.0.0.1:7445")


def embedded(rel, docs):
    """(config text, config host dir, pod) of one Talos patch."""
    config = pod = host_dir = None
    for doc in docs:
        for f in doc.get("machine", {}).get("files", []) or []:
            if f.get("path") == "/var/etc/readyprism/config.yaml":
                config, host_dir = f["content"], "/var/etc/readyprism"
                if f.get("op") != "create" or f.get("permissions") != 0o644:
                    fail(rel, "machine.files entry must be op: create, permissions: 0o644")
        for p in doc.get("machine", {}).get("pods", []) or []:
            if p.get("metadata", {}).get("name") == "readyprism":
                pod = p
        if doc.get("kind") == "EtcFileConfig" and doc.get("name") == "readyprism/config.yaml":
            config, host_dir = doc["contents"], "/etc/readyprism"
        if doc.get("kind") == "KubeStaticPodConfig" and doc.get("name") == "readyprism":
            pod = doc["pod"]
    if config is None or pod is None:
        fail(rel, "no readyprism config file or static pod found")
    return config, host_dir, pod


def standins(d):
    """A real CA certificate and a kubelet-style combined PEM, for `readyprism check`."""
    ca, pem = os.path.join(d, "ca.crt"), os.path.join(d, "kubelet-client-current.pem")
    run = lambda *a: subprocess.run(a, cwd=d, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "k.pem", "-out", "ca.crt", "-days", "1", "-subj", "/CN=stand-in")
    with open(pem, "w") as f:
        f.write(open(ca).read() + open(os.path.join(d, "k.pem")).read())
    os.chmod(pem, 0o600)
    return {"/etc/kubernetes/pki/ca.crt": ca, "/var/lib/kubelet/pki/kubelet-client-current.pem": pem}


def supports_skip(binary):
    res = subprocess.run([binary, "check", "--help"], capture_output=True, text=True)
    return "--skip-node-files" in res.stdout


def host_ip(address):
    """The IP of a `host:port` backend address, or None for a DNS name."""
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_fleet_config(where, cfg):
    """One config for the whole cluster: zones from addresses, discovery on, its cache set, the
    status file (if any) on the writable mount."""
    zones = cfg.get("zones") or {}
    nets = [(z, ipaddress.ip_network(n)) for z, ns in zones.items() for n in ns]
    problems = []
    if not nets:
        problems.append("no `zones` map (each node's zone must come from its addresses)")
    if "zone" in cfg:
        problems.append(f"sets this node's `zone: {cfg['zone']}`: the file would differ per zone")
    for b in cfg.get("backends", []):
        ip = host_ip(b["address"])
        if "zone" in b:
            problems.append(f"backend {b['address']} sets `zone`; the zones map gives it")
        elif ip is not None and not any(ip in n for _, n in nets):
            problems.append(f"backend {b['address']} is in no zone of the map")
    disc = cfg.get("discovery") or {}
    if disc.get("endpoints") is not True:
        problems.append("discovery.endpoints is not true (the backend list must follow the cluster)")
    if os.path.dirname(disc.get("cache") or "") != CACHE_DIR:
        problems.append(f"discovery.cache {disc.get('cache')!r} is not a file in {CACHE_DIR}")
    # readyprism's default status file; "" keeps none. It must be on the writable mount.
    status_file = cfg.get("status_file", "/var/lib/readyprism/status.json")
    if status_file and os.path.dirname(status_file) != CACHE_DIR:
        problems.append(f"status_file {status_file!r} is not a file in {CACHE_DIR} (the writable mount)")
    for p in problems:
        fail(where, p)
    if not problems:
        ok(where, f"one config for the cluster: {len(zones)} zones, {len(cfg['backends'])} seed(s), "
           f"discovery on, cache {disc['cache']}")


def check_config(where, text, binary, tmp, stand):
    """`readyprism check` on the config as written, with --skip-node-files (its CA and kubelet
    certificate exist only on a node), and again with the node-only paths pointed at generated
    stand-ins so the file loading is exercised too. Returns (parsed config, resolved form)."""
    cfg = yaml.safe_load(text)
    check_fleet_config(where, cfg)
    base = os.path.join(tmp, re.sub(r"[^A-Za-z0-9]+", "_", where))
    if not supports_skip(binary):
        fail(where, "readyprism check has no --skip-node-files flag (README documents it)")
        return cfg, None
    open(base + ".yaml", "w").write(text)
    runs = [("as written, --skip-node-files", [binary, "check", "--skip-node-files", "--config", base + ".yaml"])]
    subst = text
    for node_path, local in stand.items():
        subst = subst.replace(node_path, local)
    open(base + ".standins.yaml", "w").write(subst)
    runs.append(("with stand-in CA and certificate", [binary, "check", "--config", base + ".standins.yaml"]))
    resolved = None
    for what, cmd in runs:
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            fail(where, f"readyprism check ({what}) failed: {res.stderr.strip()}")
            return cfg, None
        if resolved is None:
            resolved = res.stdout
    ok(where, f"readyprism check passed ({'; '.join(w for w, _ in runs)}; {len(cfg['backends'])} seed backends)")
    return cfg, resolved


def check_selinux_variant(docs, binary, tmp, stand):
    """v1.14 worker + selinux-ca.yaml with `tls.ca` moved as selinux-ca.yaml's sed says: the CA
    file lands inside the config directory the pod mounts, and the config still checks."""
    where = "talos/v1.14/worker.yaml + selinux-ca.yaml"
    text, host_dir, pod = embedded(where, docs)
    if text is None or text.count(f"ca: {NODE_CA}") != 1:
        fail(where, f"the embedded config must say `ca: {NODE_CA}` once (selinux-ca.yaml's sed edits it)")
        return
    extra = load_docs(os.path.join(TALOS, "v1.14", "selinux-ca.yaml"))
    names = [d.get("name") for d in extra if d.get("kind") == "EtcFileConfig"]
    if names != ["readyprism/ca.crt"] or "/etc/" + names[0] != SELINUX_CA:
        fail(where, f"selinux-ca.yaml must hold one EtcFileConfig readyprism/ca.crt, has {names}")
        return
    variant = text.replace(f"ca: {NODE_CA}", f"ca: {SELINUX_CA}")
    local = dict(stand)
    local[SELINUX_CA] = stand[NODE_CA]
    cfg, _ = check_config(where, variant, binary, tmp, local)
    check_pod(where + " (static pod)", pod, cfg, host_dir)


def check_no_zone_marker():
    """One patch per role for the cluster: nothing may still carry the per-zone copy marker."""
    hits = []
    for top in ("talos", ".ci"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(d, name)
                try:
                    text = open(path, encoding="utf-8").read()
                except (UnicodeDecodeError, OSError):
                    continue
                if ZONE_MARKER in text:
                    hits.append(os.path.relpath(path, ROOT))
    for rel in hits:
        fail(rel, f"carries the per-zone marker `# {ZONE_MARKER}` (one patch per role now; zones: maps nodes)")
    if not hits:
        ok("talos/, .ci/", "no per-zone marker anywhere")


def check_readme():
    """Talos facts in talos/README.md that a careless edit would break."""
    rel = "talos/README.md"
    lines = open(os.path.join(TALOS, "README.md")).read().splitlines()
    bad = [(i + 1, l) for i, l in enumerate(lines)
           if re.search(r"get (static)?podstatus", l) and "control-plane" not in l]
    for n, l in bad:
        fail(f"{rel}:{n}", f"advises `get staticpodstatus` without saying control-plane only "
             f"(Talos collects it on control planes only): {l.strip()}")
    if not any("get kubeprismstatuses" in l for l in lines):
        fail(rel, "does not tell to check `talosctl get kubeprismstatuses` (must be empty)")
    stale = [(i + 1) for i, l in enumerate(lines) if "/system/etc" in l]
    for n in stale:
        fail(f"{rel}:{n}", "mentions /system/etc, which Talos 1.14 does not have (/etc is an overlay)")
    if not bad and not stale:
        ok(rel, "staticpodstatus only for control planes; kubeprismstatuses checked; no /system/etc")


def known_metrics():
    """{metric: {labels}} from docs/metrics.md's tables (the names the binary exports): a row's
    first column names the metric, its third the labels (values in parentheses are not labels)."""
    out = {}
    for line in open(os.path.join(ROOT, "docs", "metrics.md")).read().splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < 5 or not cols[1].startswith("`readyprism_"):
            continue
        labels = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cols[3])))
        for name in re.findall(r"`(readyprism_[a-z_]+)`", cols[1]):
            out[name] = labels
    return out


def check_metric_use(where, expr, metrics):
    scrape = {"instance", "job", "le", "pod", "namespace", "node"}
    for name, matchers in re.findall(r"\b(readyprism_[a-z_]+)(\{[^}]*\})?", expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name) if name not in metrics else name
        if base not in metrics:
            fail(where, f"metric {name} is not in docs/metrics.md's tables")
            continue
        for label in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", matchers or ""):
            if label not in metrics[base] | scrape:
                fail(where, f"{name} has no label {label!r} (docs/metrics.md lists {sorted(metrics[base])})")
    for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        for label in filter(None, (s.strip() for s in clause.split(","))):
            names = [n for n in re.findall(r"\b(readyprism_[a-z_]+)", expr)]
            labels = set().union(*(metrics.get(re.sub(r"_(bucket|sum|count)$", "", n), set()) for n in names))
            if label not in labels | scrape:
                fail(where, f"groups by {label!r}, which none of {sorted(set(names))} carries")


def check_observability():
    metrics = known_metrics()
    if len(metrics) < 10:
        fail("docs/metrics.md", f"found only {len(metrics)} metrics in its tables; did their format change?")
    rules = yaml.safe_load(open(os.path.join(TALOS, "alerts", "readyprism-rules.yaml")))
    n = 0
    for g in rules["spec"]["groups"]:
        for r in g["rules"]:
            check_metric_use(f"alert {r.get('alert')}", r["expr"], metrics)
            n += 1
    dash = json.load(open(os.path.join(TALOS, "grafana", "readyprism-dashboard.json")))
    exprs = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    for title, e in exprs:
        check_metric_use(f"dashboard panel {title!r}", e, metrics)
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            check_metric_use(f"dashboard variable {v['name']}", v["definition"], metrics)
    ok("alerts and dashboard", f"{n} rules and {len(exprs)} panel queries use only the {len(metrics)} metrics docs/metrics.md lists")


def check_scraping(docs, binary, tmp, stand):
    """talos/scraping/: the admin keys through `readyprism check`, the firewall rule against the
    Talos schemas, the PodMonitor's relabelling."""
    rel = "talos/scraping/admin.yaml"
    advice = yaml.safe_load(open(os.path.join(TALOS, "scraping", "admin.yaml")))
    readme = open(os.path.join(TALOS, "README.md")).read()
    for key, value in advice.items():
        line = f"{key}: {json.dumps(value) if isinstance(value, str) else str(value).lower()}"
        if line not in readme:
            fail("talos/README.md", f"the scraping advice lacks `{line}` ({rel})")
    text, _, _ = embedded("talos/v1.14/worker.yaml", docs)
    cfg = yaml.safe_load(text)
    cfg.update(advice)
    check_config(f"{rel} merged into the v1.14 config", yaml.safe_dump(cfg, sort_keys=False), binary, tmp, stand)
    cfg.pop("allow_remote_admin", None)
    bare = os.path.join(tmp, "scraping_without_allow.yaml")
    open(bare, "w").write(yaml.safe_dump(cfg, sort_keys=False))
    res = subprocess.run([binary, "check", "--skip-node-files", "--config", bare], capture_output=True, text=True)
    if res.returncode == 0:
        fail(rel, "readyprism check accepts the admin address without allow_remote_admin: the advice is untested")
    else:
        ok(rel, "without allow_remote_admin the same config is refused, as the README says")
    rel = "talos/scraping/admin-firewall.yaml"
    rules = load_docs(os.path.join(TALOS, "scraping", "admin-firewall.yaml"))
    for version, schema_file in SCHEMAS.items():
        schema = json.load(open(os.path.join(TALOS, "schema", schema_file)))
        by_kind = kinds(schema)
        for i, doc in enumerate(rules):
            definition = by_kind.get(doc.get("kind"))
            if definition is None:
                fail(rel, f"kind {doc.get('kind')!r} is not in the {version} schema")
                continue
            errs = schema_errors(schema, definition, doc)
            for e in errs:
                fail(f"{rel} document {i + 1}", f"{schema_file} #/$defs/{definition}: {e}")
            if not errs:
                ok(f"{rel} document {i + 1}", f"valid against {schema_file} #/$defs/{definition}")
    admin_rules = [d for d in rules if d.get("kind") == "NetworkRuleConfig"
                   and 7446 in (d.get("portSelector") or {}).get("ports", [])
                   and (d.get("portSelector") or {}).get("protocol") == "tcp" and d.get("ingress")]
    if not admin_rules:
        fail(rel, "no NetworkRuleConfig selecting tcp 7446 from a subnet")
    rel = "talos/scraping/podmonitor.yaml"
    pm = load_docs(os.path.join(TALOS, "scraping", "podmonitor.yaml"))[0]
    eps = pm.get("spec", {}).get("podMetricsEndpoints", [])
    relabels = [r for e in eps for r in e.get("relabelings", [])
                if r.get("targetLabel") == "instance"
                and r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"]]
    if pm.get("kind") != "PodMonitor" or not any(e.get("port") == "admin" for e in eps) or not relabels:
        fail(rel, "must be a PodMonitor on port `admin` relabelling instance from __meta_kubernetes_pod_node_name")
    else:
        ok(rel, "PodMonitor on port admin, instance = the node's name")


def check_runbooks():
    """Every alert links its section of docs/runbooks.md."""
    path = os.path.join(ROOT, "docs", "runbooks.md")
    if not os.path.exists(path):
        fail("docs/runbooks.md", "missing")
        return
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^## (.+)$", open(path).read(), re.M)}
    rules = yaml.safe_load(open(os.path.join(TALOS, "alerts", "readyprism-rules.yaml")))
    n = 0
    for g in rules["spec"]["groups"]:
        for r in g["rules"]:
            url = (r.get("annotations") or {}).get("runbook_url", "")
            anchor = url.split("#", 1)[1] if "#" in url else ""
            if not url.split("#", 1)[0].endswith("docs/runbooks.md") or anchor not in anchors:
                fail(f"alert {r.get('alert')}", f"runbook_url {url!r} is not a section of docs/runbooks.md")
            n += 1
    ok("runbooks", f"{n} alerts each link a section of docs/runbooks.md")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readyprism", required=True)
    a = ap.parse_args()
    patches, every = check_patch_schemas()
    check_patch_roles(patches)
    check_install_forms(every, ROOT)
    check_recovery(every)
    check_shutdown_delay(ROOT, embedded("talos/v1.14/controlplane.yaml", patches["talos/v1.14/controlplane.yaml"])[0] or "")
    with tempfile.TemporaryDirectory() as tmp:
        stand = standins(tmp)
        resolved, pods = {}, {}
        for rel, docs in patches.items():
            text, host_dir, pod = embedded(rel, docs)
            if text is None or pod is None:
                continue
            cfg, resolved[rel] = check_config(f"{rel} (embedded config)", text, a.readyprism, tmp, stand)
            check_pod(f"{rel} (static pod)", pod, cfg, host_dir)
            pods[rel] = pod
        check_selinux_variant(patches["talos/v1.14/worker.yaml"], a.readyprism, tmp, stand)
        check_scraping(patches["talos/v1.14/worker.yaml"], a.readyprism, tmp, stand)
        rel = "talos/kubeadm/readyprism.yaml"
        text = open(os.path.join(TALOS, "kubeadm", "config.yaml")).read()
        cfg, resolved["talos/kubeadm/config.yaml"] = check_config("talos/kubeadm/config.yaml", text, a.readyprism, tmp, stand)
        pod = load_docs(os.path.join(ROOT, rel))[0]
        check_pod(rel, pod, cfg, "/etc/readyprism")
        pods[rel] = pod
    forms = {k: v for k, v in resolved.items() if v is not None}
    if len(set(forms.values())) == 1:
        ok("embedded configs", f"all {len(forms)} resolve to the same config")
    else:
        fail("embedded configs", "differ between files: " + ", ".join(sorted(forms)))
    first = next(iter(pods))
    differ = [rel for rel, pod in pods.items() if normalized(pod) != normalized(pods[first])]
    for rel in differ:
        fail(rel, f"static pod differs from {first} (beyond the config directory)")
    if not differ:
        ok("static pods", f"{len(pods)} forms are the same pod but for the config directory")
    check_observability()
    check_runbooks()
    check_no_zone_marker()
    check_readme()
    print(f"validate: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
