//! Bad configuration and unusable files: one clear line naming file, field and line, nothing
//! started, and the exit code that says which: 3 for a rejected config (or a file it names), 1 for
//! a runtime failure (a port in use).

use crate::support::*;

#[test]
fn each_kind_of_config_error_names_where_it_is() {
    let lab = Lab::new();
    let ca = lab.path("ca.crt").display().to_string();
    let cases = [
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nlisen: []\n"), "5:1", "lisen"),
        (format!("backends:\n  - address: a:1\n    zome: x\ntls:\n  ca: {ca}\n"), "3:", "zome"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nhealth:\n  interval: 5sec\n"), "6:", "health.interval"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nhealth:\n  interval: 1s\n  timeout: 2s\n"), "7:", "health.timeout"),
        (format!("backends:\n  - address: a:1\n  - address: a:1\ntls:\n  ca: {ca}\n"), "3:", "backends[1].address"),
        (format!("backends:\n  - address: \"::1:6443\"\ntls:\n  ca: {ca}\n"), "2:", "backends[0].address"),
        (format!("backends: []\ntls:\n  ca: {ca}\n"), "1:", "backends"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nconnect_timeout: 0s\n"), "5:", "connect_timeout"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nwhen_none_ready: sometimes\n"), "5:", "when_none_ready"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\ndead_path_timeout: 500ms\n"), "5:", "dead_path_timeout"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nadmin: localhost:7446\n"), "5:", "admin"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\n  client_key: /k.pem\n"), "5:", "tls.client_key"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\ndiscovery:\n  endpoints: true\n  interval: 500ms\n"), "7:", "discovery.interval"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\nhealth:\n  interval: 5s\ndiscovery:\n  interval: 0s\n"), "8:", "discovery.interval"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\ndiscovery:\n  endpoints: true\n  cache: [a, b]\n"), "7:", "discovery.cache"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\ndiscovery:\n  cache: backends.json\n"), "6:", "discovery.cache"),
        (format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\ndiscovery:\n  endpoint: true\n"), "6:", "endpoint"),
        ("backends:\n  - address: a:1\n  tls: [\n".to_string(), "", "bad.yaml"),
    ];
    for (i, (text, pos, field)) in cases.iter().enumerate() {
        let file = lab.write("bad.yaml", text);
        for cmd in ["check", "run"] {
            let o = readyprism(&[cmd, "--config", &file]);
            let err = stderr(&o);
            assert_eq!(
                o.status.code(),
                Some(3),
                "case {i} ({cmd}): a rejection: {text}"
            );
            assert!(
                err.contains(&format!("{file}:{pos}")),
                "case {i}: {err:?} lacks {file}:{pos}"
            );
            assert!(err.contains(field), "case {i}: {err:?} lacks field {field}");
            assert_eq!(err.trim().lines().count(), 1, "case {i}: one line: {err:?}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

#[test]
fn a_file_the_balancer_could_never_write_is_refused_where_it_is() {
    let lab = Lab::new();
    let ca = lab.path("ca.crt").display().to_string();
    let dir = lab.dir.path().display().to_string();
    let base = format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\n");
    let long = |n: usize| format!("{dir}/{}", "n".repeat(n));
    // (what follows the base from line 5, where, the field, what is said)
    let cases = [
        (
            format!(
                "discovery:\n  endpoints: true\n  cache: {dir}/x.json\nstatus_file: {dir}/x.json\n"
            ),
            "8:",
            "status_file",
            "is also discovery.cache",
        ),
        (
            "discovery:\n  cache: /var/lib/readyprism/status.json\n".to_string(),
            "6:",
            "discovery.cache",
            "is also the status file",
        ),
        (
            format!("status_file: {}\n", long(234)),
            "5:",
            "status_file",
            "names a file of 234 bytes",
        ),
        (
            format!("discovery:\n  endpoints: true\n  cache: {}\n", long(255)),
            "7:",
            "discovery.cache",
            "at most 233 fit",
        ),
    ];
    for (i, (extra, pos, field, said)) in cases.iter().enumerate() {
        let file = lab.write("bad.yaml", &format!("{base}{extra}"));
        for cmd in ["check", "run"] {
            let o = readyprism(&[cmd, "--config", &file]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(3), "case {i} ({cmd}): {err}");
            assert!(
                err.contains(&format!("{file}:{pos} {field}: ")),
                "case {i} ({cmd}): {err:?} lacks {file}:{pos} {field}"
            );
            assert!(err.contains(said), "case {i} ({cmd}): {err:?}");
            assert_eq!(err.trim().lines().count(), 1, "case {i}: one line: {err:?}");
        }
    }
}

#[test]
fn each_zones_error_names_where_it_is() {
    let lab = Lab::new();
    let ca = lab.path("ca.crt").display().to_string();
    let base = format!("backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: {ca}\nzones:\n");
    // (the zones: entries from line 6, where, the field, what is said)
    let cases = [
        (
            "  dc-a: [\"10.0.1.0/33\"]\n",
            "6:11",
            "zones.dc-a[0]",
            "is not a network in CIDR form",
        ),
        (
            "  dc-a: [\"10.0.1.0/24\", \"fd00:2::\"]\n",
            "6:26",
            "zones.dc-a[1]",
            "is not a network in CIDR form",
        ),
        (
            "  dc-a:\n    - 10.0.1.0/24\n    - 10.0.2.5/24\n",
            "8:7",
            "zones.dc-a[1]",
            "has host bits set: the network is 10.0.2.0/24",
        ),
        (
            "  \"\": [\"10.0.1.0/24\"]\n",
            "6:3",
            "zones",
            "a zone name must not be empty",
        ),
        (
            "  dc-a: []\n",
            "6:3",
            "zones.dc-a",
            "a zone needs at least one network",
        ),
        (
            "  dc-a: 10.0.1.0/24\n",
            "6:",
            "zones.dc-a",
            "expected a sequence",
        ),
        (
            "  dc-a: [\"10.0.1.0/24\"]\n  dc-b: [\"10.0.2.0/24\", \"10.0.1.0/24\"]\n",
            "7",
            "zones.dc-b[1]",
            "10.0.1.0/24 is also a network of zone dc-a",
        ),
    ];
    for (zones, at, field, what) in cases {
        let file = lab.write("zones.yaml", &format!("{base}{zones}"));
        for cmd in ["check", "run"] {
            let o = readyprism(&[cmd, "--config", &file]);
            let err = stderr(&o);
            assert!(!o.status.success(), "{cmd} accepted:\n{zones}");
            let want = format!("{file}:{at}");
            assert!(err.contains(&want), "{err:?} lacks {want}");
            assert!(
                err.contains(&format!(": {field}: ")),
                "{err:?} lacks {field}"
            );
            assert!(err.contains(what), "{err:?} lacks {what}");
            assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");
        }
    }
}

/// `readyprism run --config file` fails with exit `code` and says `want` in one line, starting
/// nothing and panicking nowhere.
fn run_says_in_one_line(file: &str, want: &str, code: i32) {
    let o = readyprism(&["run", "--config", file]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{want}: {err}");
    assert!(err.contains(want), "{err:?} lacks {want:?}");
    assert_eq!(
        err.lines().filter(|l| l.contains("readyprism:")).count(),
        1,
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("readyprism started"), "nothing starts: {err}");
}

/// A config listening on `listen` with the `tls` section's lines.
fn tls_config(tls: &str, listen: &str) -> String {
    format!("listen: [\"{listen}\"]\nadmin: \"127.0.0.1:0\"\nbackends:\n  - address: 127.0.0.1:1\ntls:\n{tls}")
}

#[test]
fn a_busy_listen_port_is_one_clear_line() {
    let lab = Lab::new();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy_addr = busy.local_addr().expect("addr").to_string();
    let ca = lab.path("ca.crt").display().to_string();
    let file = lab.write("c.yaml", &tls_config(&format!("  ca: {ca}\n"), &busy_addr));
    run_says_in_one_line(
        &file,
        &format!("{file}:1:1: listen[0]: cannot listen on {busy_addr}"),
        1,
    );
    drop(busy);
}

#[test]
fn an_unusable_tls_file_is_one_clear_line_from_check_as_from_run() {
    let lab = Lab::new();
    let garbage = lab.write("garbage.pem", "this is not PEM\n");
    let ca = lab.path("ca.crt").display().to_string();
    // A certificate and a key that do not belong together.
    let cert = lab.write("cert.pem", &lab.cluster.client.cert_pem);
    let key = lab.write("key.pem", &lab.cluster.client.key_pem);
    let other_key = lab.write(
        "other-key.pem",
        &lab.cluster.ca.client("other").expect("cert").key_pem,
    );
    let base = |tls: &str| tls_config(tls, "127.0.0.1:0");
    let dir = lab.path("").display().to_string();
    let dir = dir.trim_end_matches('/').to_string();
    // (config, the field and its line:column, what is said about it)
    let cases = [
        (
            base("  ca: /nonexistent/ca.crt\n"),
            "6:3: tls.ca",
            "/nonexistent/ca.crt: cannot read".to_string(),
        ),
        (
            base(&format!("  ca: {dir}\n")),
            "6:3: tls.ca",
            format!("{dir}: cannot read: not a regular file (a directory)"),
        ),
        (
            base(&format!("  ca: {garbage}\n")),
            "6:3: tls.ca",
            format!("{garbage}: no CERTIFICATE"),
        ),
        (
            base(&format!("  ca: {ca}\n  client_cert: {ca}\n")),
            "7:3: tls.client_cert",
            format!("{ca}: no usable private key"),
        ),
        (
            base(&format!("  ca: {ca}\n  client_cert: {dir}\n")),
            "7:3: tls.client_cert",
            format!("{dir}: cannot read: not a regular file (a directory)"),
        ),
        (
            base(&format!(
                "  ca: {ca}\n  client_cert: {garbage}\n  client_key: {key}\n"
            )),
            "7:3: tls.client_cert",
            format!("{garbage}: no CERTIFICATE"),
        ),
        (
            base(&format!(
                "  ca: {ca}\n  client_cert: {cert}\n  client_key: {other_key}\n"
            )),
            "8:3: tls.client_key",
            other_key.clone(),
        ),
        (
            base(&format!(
                "  ca: {ca}\n  client_cert: {cert}\n  client_key: /nonexistent/key.pem\n"
            )),
            "8:3: tls.client_key",
            "/nonexistent/key.pem: cannot read".to_string(),
        ),
    ];
    for (text, at, what) in cases {
        let file = lab.write("c.yaml", &text);
        let want = format!("{file}:{at}: {what}");
        // `check` loads and verifies the files exactly as `run` does (but binds nothing).
        let checked = readyprism(&["check", "--config", &file]);
        assert_eq!(
            checked.status.code(),
            Some(3),
            "check rejects what run rejects: {want}"
        );
        assert!(
            stderr(&checked).contains(&want),
            "{:?} lacks {want:?}",
            stderr(&checked)
        );
        run_says_in_one_line(&file, &want, 3);
    }
}

/// Binds `127.0.0.N:7445` for the first loopback address `N` where the port is free (a test may not
/// take 127.0.0.1:7445, where a real balancer may run); every 127/8 address is local on Linux.
fn hold_port_7445() -> std::net::TcpListener {
    (2..=254)
        .find_map(|n| std::net::TcpListener::bind(format!("127.0.0.{n}:7445")).ok())
        .expect("some 127.0.0.N:7445 is free")
}

#[test]
fn a_taken_port_7445_asks_whether_kubeprism_is_still_enabled() {
    let lab = Lab::new();
    let ca = lab.path("ca.crt").display().to_string();
    let held = hold_port_7445();
    let taken = held.local_addr().expect("addr").to_string();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = busy.local_addr().expect("addr").to_string();
    let config = |listen: &str| {
        format!("listen: [\"{listen}\"]\nadmin: \"127.0.0.1:0\"\nbackends:\n  - address: 127.0.0.1:1\ntls:\n  ca: {ca}\n")
    };
    let hint = "is KubePrism still enabled? (talosctl get kubeprismstatuses)";

    let file = lab.write("kubeprism.yaml", &config(&taken));
    let err = stderr(&readyprism(&["run", "--config", &file]));
    let want = format!("{file}:1:1: listen[0]: cannot listen on {taken}: ");
    assert!(err.contains(&want), "{err:?} lacks {want:?}");
    assert!(err.contains(hint), "{err:?} lacks {hint:?}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");

    // Another port in use is only that: KubePrism holds 7445 alone.
    let file = lab.write("other.yaml", &config(&other));
    let err = stderr(&readyprism(&["run", "--config", &file]));
    assert!(err.contains(&format!("cannot listen on {other}")), "{err}");
    assert!(!err.contains("KubePrism"), "{err}");
    drop((held, busy));
}
