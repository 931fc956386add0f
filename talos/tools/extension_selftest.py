#!/usr/bin/env python3
"""The self-test of extension_check.py: each rule is fed a broken input and must reject it, and the
shipped files must pass, so that a check cannot pass by checking nothing. Run as
`extension_check.py selftest` (by .ci/extension-check)."""
import json, os

import yaml

from extension_check import (EXT, NAME, esc_errors, fit_errors, manifest_errors, role_errors,
                             spec_errors, version_errors)
from validate import ROOT, SCHEMAS, kinds, load_docs, schema_errors


def selftest():
    """Runs every case; returns the exit status (1 if any rule accepted its broken input)."""
    good_m = yaml.safe_load(open(os.path.join(EXT, "manifest.yaml")))
    good_s = yaml.safe_load(open(os.path.join(EXT, "readyprism.yaml")))
    esc = load_docs(os.path.join(EXT, "extension-service-config.yaml"))[0]
    cfg = yaml.safe_load(esc["configFiles"][0]["content"])
    failed = []

    def expect(what, errs):
        (print(f"ok   selftest: {what} -> {errs[0]}") if errs else failed.append(what))

    def m(**kw):
        d = json.loads(json.dumps(good_m))
        for k, v in kw.items():
            d["metadata"][k] = v
        return d

    def s(fn):
        d = json.loads(json.dumps(good_s))
        fn(d)
        return d

    for what, errs in [
        ("the shipped manifest", manifest_errors(good_m)), ("the shipped spec", spec_errors(good_s)),
        ("the shipped ExtensionServiceConfig", esc_errors(esc, "esc")), ("the shipped fit", fit_errors(good_s, esc, cfg)),
    ]:
        if errs:
            failed.append(f"{what} is rejected: {errs}")
    expect("manifest version v1alpha2", manifest_errors({**good_m, "version": "v1alpha2"}))
    expect("misspelt manifest key", manifest_errors({**good_m, "metdata": {}}))
    expect("constraint excluding 1.13", manifest_errors(m(compatibility={"talos": {"version": ">= v1.14.0"}})))
    expect("unparsable constraint", manifest_errors(m(compatibility={"talos": {"version": "~> 1.13"}})))
    expect("non-semver version", manifest_errors(m(version="latest")))
    cargo = open(os.path.join(ROOT, "Cargo.toml")).read()
    if version_errors(good_m, cargo):
        failed.append(f"the shipped manifest's version: {version_errors(good_m, cargo)}")
    expect("manifest version behind Cargo.toml", version_errors(m(version="0.0.1"), cargo))
    expect("empty author", manifest_errors(m(author="")))
    expect("upper-case service name", spec_errors(s(lambda d: d.update(name="ReadyPrism"))))
    expect("restart sometimes", spec_errors(s(lambda d: d.update(restart="sometimes"))))
    expect("empty entrypoint", spec_errors(s(lambda d: d["container"].update(entrypoint=""))))
    expect("two kinds in one dependency", spec_errors(s(lambda d: d["depends"].append({"time": True, "path": "/x"}))))
    expect("relative path dependency", spec_errors(s(lambda d: d["depends"].append({"path": "x"}))))
    expect("unknown network status", spec_errors(s(lambda d: d["depends"].append({"network": ["online"]}))))
    expect("misspelt spec key", spec_errors(s(lambda d: d["container"].update(arguments=[]))))
    expect("relative mount source", spec_errors(s(lambda d: d["container"]["mounts"].append({"source": "var", "destination": "/x"}))))
    expect("ExtensionServiceConfig without files or environment", esc_errors({"name": NAME}, "esc"))
    expect("configFiles entry without mountPath", esc_errors({"name": NAME, "configFiles": [{"content": "x"}]}, "esc"))
    expect("mountPaths stored as one file", esc_errors({"name": NAME, "configFiles": [
        {"content": "x", "mountPath": "/a/b-c"}, {"content": "y", "mountPath": "/a-b/c"}]}, "esc"))
    expect("config name differs from the service", fit_errors(good_s, {**esc, "name": "other"}, cfg))
    expect("--config not the mountPath", fit_errors(s(lambda d: d["container"]["args"].__setitem__(-1, "/etc/x.yaml")), esc, cfg))
    expect("restart never", fit_errors(s(lambda d: d.update(restart="never")), esc, cfg))
    expect("kubelet directory not mounted", fit_errors(s(lambda d: d["container"].update(
        mounts=[x for x in d["container"]["mounts"] if x["destination"] != "/var/lib/kubelet"])), esc, cfg))
    expect("a /var/lib/kubelet/pki mount", fit_errors(s(lambda d: [x.update(
        source="/var/lib/kubelet/pki", destination="/var/lib/kubelet/pki")
        for x in d["container"]["mounts"] if x["destination"] == "/var/lib/kubelet"]), esc, cfg))
    expect("no `service: cri` dependency", fit_errors(s(lambda d: d.update(
        depends=[x for x in d["depends"] if x.get("service") != "cri"])), esc, cfg))
    expect("no `time: true` dependency", fit_errors(s(lambda d: d.update(
        depends=[x for x in d["depends"] if not x.get("time")])), esc, cfg))
    cached = {**cfg, "discovery": {"endpoints": True, "cache": "/var/lib/readyprism/backends.json"}}
    expect("discovery cache read-only", fit_errors(s(lambda d: [x.update(options=["bind", "ro"]) for x in d["container"]["mounts"]]), esc, cached))
    expect("writable mount nothing is written to", fit_errors(s(lambda d: [x.update(options=["bind", "rw"]) for x in d["container"]["mounts"]]), esc, cached))
    schema = json.load(open(os.path.join(ROOT, "talos", "schema", SCHEMAS["v1.14"])))
    expect("ExtensionServiceConfig key the schema lacks", schema_errors(
        schema, kinds(schema)["ExtensionServiceConfig"], {**esc, "configFile": []}))
    expect("worker patch keeping KubePrism", role_errors("w", [{"machine": {}}], "v1.13", "worker"))
    for what in failed:
        print(f"FAIL selftest: {what}")
    print(f"selftest: {len(failed)} failure(s)")
    return 1 if failed else 0
