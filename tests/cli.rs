//! Operator commands end to end: `check` output and warnings (the budget; the paths it writes:
//! `check_paths`), `status` exit codes, and a real client-go client (kubectl) through
//! the balancer.

use std::process::Command;

use readyprism::verdict::State::{Ready, Unready};

use crate::support::*;

#[test]
fn check_prints_the_config_as_resolved() {
    let lab = Lab::new();
    let file = lab.write(
        "c.yaml",
        &format!(
            "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: {}\n",
            lab.path("ca.crt").display()
        ),
    );
    let o = readyprism(&["check", "--config", &file, "--zone", "dc-b"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "127.0.0.1:7445",
        "127.0.0.1:7446",
        "zone: dc-b",
        "interval: 5s",
        "timeout: 3s",
        "fast_interval: 1s",
        "rise: 2",
        "fall: 2",
        "connect_timeout: 1s",
        "when_none_ready: fail_open",
        "shutdown_grace: 5s",
        "server_name: 10.0.1.10",
        "path: /readyz",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn check_loads_the_files_as_run_does_unless_told_they_exist_only_on_the_node() {
    let lab = Lab::new();
    let garbage = lab.write("garbage.pem", "this is not PEM\n");
    let on_node_only = "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /etc/kubernetes/pki/ca.crt\n  client_cert: /var/lib/kubelet/pki/kubelet-client-current.pem\n";
    let file = lab.write("node.yaml", on_node_only);
    let o = readyprism(&["check", "--config", &file]);
    assert!(!o.status.success(), "the CA does not exist here");
    assert!(
        stderr(&o).contains("/etc/kubernetes/pki/ca.crt: cannot read"),
        "{}",
        stderr(&o)
    );
    let o = readyprism(&["check", "--skip-node-files", "--config", &file]);
    assert!(o.status.success(), "{}", stderr(&o));

    // A missing client certificate is fine (anonymous probes); a garbage one is not.
    let ca = lab.path("ca.crt").display().to_string();
    let missing =
        format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\n  client_cert: /nonexistent.pem\n");
    let o = readyprism(&["check", "--config", &lab.write("m.yaml", &missing)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bad = format!("backends:\n  - address: a:1\ntls:\n  ca: {ca}\n  client_cert: {garbage}\n");
    let o = readyprism(&["check", "--config", &lab.write("g.yaml", &bad)]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(&format!("{garbage}: no CERTIFICATE")),
        "{}",
        stderr(&o)
    );
}

fn status(admin: &str, json: bool) -> (i32, String, String) {
    let mut args = vec!["status", "--admin", admin];
    if json {
        args.push("--json");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(&args)
        .output()
        .expect("run status");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_command_exit_code_says_ready_unready_or_unreachable() {
    let lab = Lab::new();
    let (a, app) = lab.one_ready("").await;
    let admin = app.admin_addr().to_string();

    let (code, out, err) = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || status(&admin, false)
    })
    .await
    .expect("join");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&addr(&a)) && out.contains("ready") && out.contains("dc-a"),
        "{out}"
    );

    let (code, out, _) = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || status(&admin, true)
    })
    .await
    .expect("join");
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("--json prints the raw JSON");
    assert_eq!(v["backends"][0]["state"], "ready");

    a.control.set_ready(false);
    wait_states(&app, &[Unready]).await;
    let (code, out, _) = tokio::task::spawn_blocking(move || status(&admin, false))
        .await
        .expect("join");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("readyz 500: etcd, etcd-readiness failed"),
        "{out}"
    );

    let (_held, closed) = refusing_addr();
    let (code, _, err) = tokio::task::spawn_blocking(move || status(&closed, false))
        .await
        .expect("join");
    assert_eq!(code, 2);
    assert!(err.contains("cannot reach admin endpoint"), "{err}");
    app.shutdown().await;
}

/// `readyprism status`'s HTTP client (a unit test of `src/cli/http.rs` before; here it shares the
/// refusing address with the other tests).
#[tokio::test]
async fn closed_port_is_reported_as_unreachable_in_one_line() {
    let (_held, addr) = refusing_addr();
    let err = readyprism::cli::http::get(&addr, "/status")
        .await
        .expect_err("nothing listens");
    assert_eq!(
        err.to_string(),
        format!("cannot reach admin endpoint {addr}: connection refused")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reaches_an_apiserver_through_the_balancer_with_a_kubelet_style_cert() {
    if !kubectl_available(
        "kubectl_reaches_an_apiserver_through_the_balancer_with_a_kubelet_style_cert",
    ) {
        return;
    }
    let lab = Lab::new();
    let unready_local = lab.fake("local").await;
    unready_local.control.set_ready(false);
    let remote = lab.fake("remote").await;
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&unready_local), "dc-a"), (addr(&remote), "dc-b")],
            "",
        ))
        .await;
    wait_states(&app, &[Unready, Ready]).await;
    let pem = lab.path("kubelet-client-current.pem").display().to_string();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        app.listen_addrs()[0],
        lab.path("ca.crt").display()
    );
    let kc = lab.path("kubeconfig");
    std::fs::write(&kc, kubeconfig).expect("write kubeconfig");
    let o = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["version", "-o", "json", "--request-timeout=5s"])
            .output()
    })
    .await
    .expect("join")
    .expect("kubectl runs");
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("kubectl output: {o:?}"));
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.32.0-fake");
    assert_eq!(
        v["serverVersion"]["platform"], "remote",
        "the unready local apiserver was skipped"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_apiserver_runs_as_its_own_process_with_a_readyz_that_can_follow_etcd() {
    let lab = Lab::new();
    let server = lab.cluster.ca.server(&["127.0.0.1"]).expect("cert");
    let cert = lab.write("server.crt", &server.cert_pem);
    let key = lab.write("server.key", &server.key_pem);
    let ca = lab.path("ca.crt").display().to_string();
    let (_held, no_etcd) = refusing_addr();
    // Port 0; the bound address is read from the process's start-up log line.
    let spawn = |name: &str, etcd: Option<&str>| {
        use std::io::BufRead;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_readyprism"));
        cmd.args(["--log-format", "json", "sim-apiserver", "--name", name])
            .args(["--listen", "127.0.0.1:0"])
            .args(["--cert", &cert, "--key", &key, "--client-ca", &ca])
            .arg("--require-client-cert")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(url) = etcd {
            cmd.args(["--etcd", url]);
        }
        let mut child = KillOnDrop(cmd.spawn().expect("spawn sim-apiserver"));
        let stderr = child.0.stderr.take().expect("stderr");
        let listening = std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
            .find(|v| v["fields"]["message"] == "simulated apiserver listening")
            .expect("the sim-apiserver says where it listens");
        let addr = listening["fields"]["listen"]
            .as_str()
            .expect("listen")
            .to_string();
        (child, addr)
    };
    let (_plain, plain_addr) = spawn("site-a", None);
    let (_etcd, etcd_addr) = spawn("site-b", Some(&format!("http://{no_etcd}")));
    let app = lab
        .start(&lab.yaml("dc-a", &[(plain_addr, "dc-a"), (etcd_addr, "dc-b")], ""))
        .await;
    let doc = wait_states(&app, &[Ready, Unready]).await;
    let reason = doc.backends[1].last_error.clone().unwrap_or_default();
    assert_eq!(
        reason, "readyz 500: etcd, etcd-readiness failed",
        "the read failed; kube-apiserver withholds why"
    );
    assert_eq!(landed(app.listen_addrs()[0]).await, "site-a");
    app.shutdown().await;
}

/// Kills the child process when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `name` in the lab: one backend and the node's cluster CA, then `more` (top-level
/// keys); returns its path.
fn one_backend_config(lab: &Lab, name: &str, more: &str) -> String {
    lab.write(
        name,
        &format!(
            "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /etc/kubernetes/pki/ca.crt\n{more}"
        ),
    )
}

/// `readyprism check --config <file> --skip-node-files`, then `extra`.
fn check_away(file: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["check", "--config", file, "--skip-node-files"];
    args.extend_from_slice(extra);
    readyprism(&args)
}

/// A config with the given `health:` lines, validated away from the node.
fn check_budget(health: &str, extra: &[&str]) -> (String, String) {
    let lab = Lab::new();
    let o = check_away(&one_backend_config(&lab, "c.yaml", health), extra);
    assert!(
        o.status.success(),
        "a budget never fails check: {}",
        stderr(&o)
    );
    (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o))
}

#[test]
fn check_prints_the_not_ready_budget_of_the_defaults_within_the_node_grace_period() {
    let (out, err) = check_budget("", &[]);
    for want in [
        "# NotReady budget (worst case from a backend going bad, on the probe path):",
        "5.5s  interval 5s + 10 % jitter",
        "6s  up to timeout 3s each, started max(timeout 3s, fast_interval 1s) apart",
        "11.5s  new connections avoid it from here",
        "17.5s  + up to 2 × timeout 3s",
        "18s  + spread 0.5s",
        "12.5s  + connect_timeout 1s",
        "worst case             18s",
        "request in flight      10s  dead_path_timeout 10s",
        "dead_path_timeout: 10s",
        "node grace period 40s (--node-grace): the worst case is 45 % of it",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!err.contains("WARN"), "{err}");
    // Still a YAML document: the budget is comments.
    let budget = out.find("# NotReady").expect("printed");
    assert!(out[budget..].lines().all(|l| l.starts_with('#')), "{out}");
}

/// docs/commands.md shows the budget of the defaults as `check` prints it, line for line.
#[test]
fn the_budget_sample_in_the_commands_page_is_what_check_prints() {
    let (out, _) = check_budget("", &[]);
    let from = out.find("# NotReady budget").expect("printed");
    let printed: Vec<&str> = out[from..]
        .lines()
        .take_while(|l| !l.starts_with("#   Failed client dials"))
        .collect();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md"))
        .expect("docs/commands.md");
    let from = page
        .find("# NotReady budget")
        .expect("the sample on the page");
    let shown: Vec<&str> = page[from..]
        .lines()
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert_eq!(
        shown,
        printed,
        "docs/commands.md's budget sample is out of date; `check` prints:\n{}",
        printed.join("\n")
    );
}

#[test]
fn check_warns_when_a_slow_config_takes_over_half_the_node_grace_period() {
    let slow = "health:\n  interval: 30s\n  timeout: 10s\n  fall: 3\n";
    let (out, err) = check_budget(slow, &[]);
    for want in [
        "33s  interval 30s + 10 % jitter",
        "3 failing probes       30s",
        "63s  new connections avoid it",
        "worst case           83.5s",
        "node grace period 40s (--node-grace): the worst case is 209 % of it",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(
        err.contains("readyprism check: WARN: the NotReady budget's worst case 83.5s is over half the node grace period 40s"),
        "{err}"
    );

    // Kubernetes 1.32's 50 s: the share follows; 83.5 s is still over half of it.
    let (out, err) = check_budget(slow, &["--node-grace", "50s"]);
    assert!(
        out.contains("node grace period 50s (--node-grace): the worst case is 167 % of it"),
        "{out}"
    );
    assert!(err.contains("over half the node grace period 50s"), "{err}");
    // Over half of 150 s still warns; exactly half of 167 s does not.
    let (out, err) = check_budget(slow, &["--node-grace", "150s"]);
    assert!(out.contains("the worst case is 56 % of it"), "{out}");
    assert!(err.contains("WARN"), "{err}");
    let (_, err) = check_budget(slow, &["--node-grace", "167s"]);
    assert!(!err.contains("NotReady budget"), "{err}");
    // Its 30 s interval also needs a longer apiserver shutdown delay than the Talos patches' 15 s.
    assert!(
        err.contains("a planned hand-off needs kube-apiserver's --shutdown-delay-duration above 48s but the shipped Talos control-plane patches set 15s"),
        "{err}"
    );
}

#[test]
fn check_refuses_counts_or_grace_periods_beyond_their_bounds() {
    let lab = Lab::new();
    let file = one_backend_config(&lab, "c.yaml", "health:\n  fall: 1000000\n");
    let o = check_away(&file, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("c.yaml:6: health.fall: 1000000 is more than the maximum of 10"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty(), "no budget of years printed");

    let file = one_backend_config(&lab, "ok.yaml", "");
    let o = check_away(&file, &["--node-grace", "18446744073709551615s"]);
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", stderr(&o));
    assert!(
        stderr(&o).contains("is more than the maximum of 60m"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_fleet_sample_in_the_commands_page_is_what_check_prints() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md"))
        .expect("docs/commands.md");
    let section = &page[page.find("### The load of a fleet").expect("the section")..];
    // The page's config, then its sample: the first two fenced blocks of the section.
    let blocks: Vec<&str> = section.split("```").collect();
    let config = blocks[1].strip_prefix("yaml\n").expect("a yaml block");
    let shown: Vec<&str> = blocks[3].trim_matches('\n').lines().collect();
    let lab = Lab::new();
    let file = lab.write("fleet.yaml", config);
    let o = check_away(&file, &["--fleet-size", "100000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let printed: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("# Control-plane load"))
        .take_while(|l| l.starts_with("# Control-plane load") || l.starts_with("#   "))
        .collect();
    assert_eq!(
        shown,
        printed,
        "docs/commands.md's fleet sample is out of date; `check` prints:\n{}",
        printed.join("\n")
    );
}

#[test]
fn check_refuses_a_fleet_of_no_nodes() {
    let lab = Lab::new();
    let file = one_backend_config(&lab, "c.yaml", "");
    let o = check_away(&file, &["--fleet-size", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--fleet-size"), "{}", stderr(&o));
}
