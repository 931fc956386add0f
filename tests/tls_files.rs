//! The certificate and CA files on the app run from its config file: a path that turns into a FIFO never blocks
//! the runtime thread, a file over 1 MiB is refused with one line naming file and field, and the
//! directory holding the client certificate replaced whole (as Talos does on a CA rotation or a
//! node rename) is followed.

use crate::support::Running;
use crate::support::*;

const CANNOT_LOAD: &str =
    "TLS files cannot be loaded; keeping the previous ones, retrying every 5s";

fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.expect("run mkfifo").success(), "mkfifo {path:?}");
}

#[test]
fn a_ca_path_that_becomes_a_fifo_is_warned_about_once_with_livez_answering() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "fifo.yaml", "");
    let p = Running::start(&file);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    let ca = lab.path("ca.crt");
    std::fs::remove_file(&ca).expect("remove ca");
    mkfifo(&ca); // no writer: opening it for reading would block until one comes
    let warned = p.wait_log(CANNOT_LOAD, |_| true);
    let error = warned["fields"]["error"].as_str().unwrap_or_default();
    assert_eq!(
        error,
        format!("{}: cannot read: not a regular file (a FIFO)", ca.display())
    );
    // The watcher retries every 5 s while the FIFO is there; until it has, /livez keeps answering.
    let deadline = tokio::time::Instant::now() + patience();
    while !p
        .logs()
        .iter()
        .any(|v| v["fields"]["message"] == "TLS files still cannot be loaded")
    {
        assert_eq!(blocking_get(p.admin, "/livez").0, 200, "/livez answers");
        assert!(tokio::time::Instant::now() < deadline, "no retry logged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(blocking_get(p.admin, "/livez").0, 200, "/livez answers");
    let warnings = p
        .logs()
        .iter()
        .filter(|v| v["fields"]["message"] == CANNOT_LOAD)
        .count();
    assert_eq!(warnings, 1, "warned once, not at every retry");
    // The CA comes back as it was: said so, and nothing else changes.
    std::fs::remove_file(&ca).expect("remove fifo");
    std::fs::write(&ca, &lab.cluster.ca.cert_pem).expect("write ca");
    p.wait_log(
        "TLS files can be loaded again; the ones in use are unchanged",
        |_| true,
    );
}

#[test]
fn a_ca_file_over_a_mebibyte_or_a_fifo_is_refused_by_check_or_run_naming_where_it_is() {
    let lab = Lab::new();
    let ca = lab.path("ca.crt");
    let file = lab.write(
        "big.yaml",
        &lab.yaml("dc-a", &[("127.0.0.1:1".to_string(), "dc-a")], ""),
    );
    // Valid certificates all the way: only the size is wrong.
    let copies = (1 << 20) / lab.cluster.ca.cert_pem.len() + 1;
    std::fs::write(&ca, lab.cluster.ca.cert_pem.repeat(copies)).expect("write big ca");
    let big = format!("{file}:5:3: tls.ca: {}: larger than 1 MiB", ca.display());
    for command in ["check", "run"] {
        let o = readyprism(&[command, "--config", &file]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{command} accepted a 1 MiB CA");
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("readyprism:")).collect();
        assert_eq!(lines, [format!("readyprism: {big}")], "{command}: {err}");
    }
    std::fs::remove_file(&ca).expect("remove ca");
    mkfifo(&ca);
    let fifo = format!(
        "{file}:5:3: tls.ca: {}: cannot read: not a regular file (a FIFO)",
        ca.display()
    );
    for command in ["check", "run"] {
        let o = readyprism(&[command, "--config", &file]);
        assert!(!o.status.success(), "{command} accepted a FIFO");
        assert!(stderr(&o).contains(&fifo), "{command}: {}", stderr(&o));
    }
}

/// Writes `issued` into a new kubelet-style PKI directory `dir`: the dated file and the
/// `kubelet-client-current.pem` symlink to it, by its absolute path once the directory is at
/// `home` (as the kubelet writes it).
fn kubelet_pki(
    dir: &std::path::Path,
    home: &std::path::Path,
    issued: &readyprism::sim::pki::Issued,
) {
    std::fs::create_dir(dir).expect("mkdir pki");
    let dated = "kubelet-client-2026-01-01-00-00-00.pem";
    std::fs::write(dir.join(dated), issued.combined_pem()).expect("write cert");
    let current = dir.join("kubelet-client-current.pem");
    std::os::unix::fs::symlink(home.join(dated), current).expect("symlink");
}

#[test]
fn the_client_certificate_directory_replaced_whole_is_followed() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let a = rt.block_on(lab.fake("a"));
    let pki = lab.path("pki");
    kubelet_pki(&pki, &pki, &lab.cluster.client);
    let cert = pki.join("kubelet-client-current.pem");
    let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a")], "").replace(
        &lab.path("kubelet-client-current.pem").display().to_string(),
        &cert.display().to_string(),
    );
    let file = lab.write("pki.yaml", &yaml);
    let p = Running::start(std::path::Path::new(&file));
    let presented = |what: &str, der: &[u8]| {
        rt.block_on(poll(what, || {
            a.control
                .last_client_cert
                .load()
                .as_deref()
                .map(Vec::as_slice)
                == Some(der)
        }));
    };
    presented(
        "the first certificate presented",
        &lab.cluster.client.cert_der,
    );

    // Talos's way: the directory removed with everything in it, then made again by the kubelet.
    let second = lab.cluster.ca.client("test-node-renamed").expect("cert");
    std::fs::remove_dir_all(&pki).expect("rm -rf pki");
    kubelet_pki(&pki, &pki, &second);
    presented(
        "the certificate of the recreated directory",
        &second.cert_der,
    );

    // A new directory renamed into the old path: another directory at the same name.
    let third = lab.cluster.ca.client("test-node").expect("cert");
    let staged = lab.path("pki.new");
    kubelet_pki(&staged, &pki, &third);
    std::fs::rename(&pki, lab.path("pki.old")).expect("rename old away");
    std::fs::rename(&staged, &pki).expect("rename new in");
    presented(
        "the certificate of the renamed-in directory",
        &third.cert_der,
    );
    assert_eq!(blocking_get(p.admin, "/livez").0, 200, "/livez answers");
}
