//! The node's balancer in the lab: readyprism itself, or one of the others it is measured
//! against head to head, each started in the node's namespace on `127.0.0.1:7445`
//! with the lab's three apiservers. The others relay TCP, so the client's mutual TLS passes
//! through them to the simulated apiservers.
//!
//! Owns the others' configurations and starting them; not readyprism's config (`cast`).
//!
//! - [`Balancer::HaproxyKubespray`]: kubespray's `haproxy.cfg.j2`
//!   (kubernetes-sigs/kubespray@46dbdd39, `roles/kubernetes/node/templates/loadbalancer/haproxy.cfg.j2`
//!   lines 1-49): `mode tcp`, `balance leastconn`, `default-server inter 15s downinter 15s rise 2
//!   fall 2 slowstart 60s maxconn 1000 maxqueue 256 weight 100`, `option httpchk GET /healthz`,
//!   `http-check expect status 200`, `check check-ssl verify none`; `retries 5`, `option
//!   redispatch`, `timeout connect 30s`, `timeout check 30s`, `timeout client 5m` (the default
//!   `loadbalancer_apiserver_keepalive_timeout`, `roles/kubernetes/node/defaults/main.yml:98`),
//!   `timeout server 15m`. Left out: the `healthz` frontend (no such port here) and `log`.
//! - [`Balancer::NginxKubespray`]: kubespray's `nginx.conf.j2` (same commit, lines 1-30): `stream`,
//!   `least_conn`, servers without parameters (nginx's defaults `max_fails=1 fail_timeout=10s`:
//!   passive only), `proxy_timeout 10m`, `proxy_connect_timeout 1s`, 2 workers. Left out: the
//!   `http` block (only a health endpoint for the node); added: a `pid` file in the lab's directory
//!   and `load_module` of the stream module (Debian builds it as a module, `libnginx-mod-stream`;
//!   kubespray's nginx image has it built in).
//! - [`Balancer::HaproxyKubeprism`]: HAProxy set up as Talos's KubePrism behaves: a TCP connect
//!   as the only health check (go-loadbalancer `loadbalancer/node.go:29-40`, siderolabs/
//!   go-loadbalancer@5e7a8b2; Talos v1.14.0-rc.1 pins v0.5.0, `go.mod:152`), every 20 s with a 15 s
//!   timeout, dials time out after 15 s (`pkg/machinery/constants/constants.go:1329,1338,1341`
//!   (v1.14.0-rc.1), passed in `internal/app/machined/pkg/controllers/k8s/kubeprism.go:193-199`);
//!   upstreams ranked in tiers by connect latency (`node.go:42-65`), so the same-site apiserver
//!   (no added delay) is first: dc-b is the server, dc-a and the witness `backup` (`option
//!   allbackups`: KubePrism balances within a tier). HAProxy's `fall 3 rise 2` (go-loadbalancer
//!   demotes on a failed check rather than counting); no TCP user timeout (HAProxy 2.6 has none on
//!   server legs; KubePrism sets 30 s, `constants.go:1335`).

use std::path::Path;
use std::time::Duration;

use super::cast::{poll, APISERVER_PORT, LISTEN};
use super::netlab::{Host, LabProcess, NetLab};

/// Which balancer runs on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balancer {
    Readyprism,
    HaproxyKubespray,
    NginxKubespray,
    HaproxyKubeprism,
}

impl Balancer {
    /// The name in the head-to-head table.
    pub fn name(self) -> &'static str {
        match self {
            Balancer::Readyprism => "readyprism",
            Balancer::HaproxyKubespray => "HAProxy (kubespray)",
            Balancer::NginxKubespray => "nginx stream (kubespray)",
            Balancer::HaproxyKubeprism => "HAProxy as KubePrism",
        }
    }

    /// The program it needs on the path (`None`: the binary under test).
    pub fn program(self) -> Option<&'static str> {
        match self {
            Balancer::Readyprism => None,
            Balancer::HaproxyKubespray | Balancer::HaproxyKubeprism => Some("haproxy"),
            Balancer::NginxKubespray => Some("nginx"),
        }
    }
}

fn server(site: Host) -> String {
    format!("{}:{APISERVER_PORT}", site.ip())
}

fn haproxy_kubespray() -> String {
    let servers: String = Host::SITES
        .iter()
        .map(|s| {
            format!(
                "  server {} {} check check-ssl verify none\n",
                s.name(),
                server(*s)
            )
        })
        .collect();
    format!(
        "global\n    maxconn 4000\n\ndefaults\n    mode http\n    option dontlognull\n    option http-server-close\n    \
         option redispatch\n    retries 5\n    timeout http-request 5m\n    timeout queue 5m\n    timeout connect 30s\n    \
         timeout client 5m\n    timeout server 15m\n    timeout http-keep-alive 30s\n    timeout check 30s\n    maxconn 4000\n\n\
         frontend kube_api_frontend\n  bind {LISTEN}\n  mode tcp\n  default_backend kube_api_backend\n\n\
         backend kube_api_backend\n  mode tcp\n  balance leastconn\n  \
         default-server inter 15s downinter 15s rise 2 fall 2 slowstart 60s maxconn 1000 maxqueue 256 weight 100\n  \
         option httpchk GET /healthz\n  http-check expect status 200\n{servers}"
    )
}

fn haproxy_kubeprism() -> String {
    let servers: String = [Host::DcB, Host::DcA, Host::Witness]
        .iter()
        .map(|s| {
            let backup = if *s == Host::DcB { "" } else { " backup" };
            format!("  server {} {} check{backup}\n", s.name(), server(*s))
        })
        .collect();
    format!(
        "global\n    maxconn 4000\n\ndefaults\n    mode tcp\n    timeout connect 15s\n    timeout client 15m\n    \
         timeout server 15m\n    timeout check 15s\n\nfrontend kubeprism\n  bind {LISTEN}\n  default_backend apiservers\n\n\
         backend apiservers\n  balance roundrobin\n  option allbackups\n  default-server inter 20s\n{servers}"
    )
}

fn nginx_kubespray(dir: &Path) -> String {
    let servers: String = Host::SITES
        .iter()
        .map(|s| format!("    server {};\n", server(*s)))
        .collect();
    format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\nerror_log stderr notice;\npid {}/nginx.pid;\nworker_processes 2;\nworker_rlimit_nofile 65535;\n\
         worker_shutdown_timeout 10s;\n\nevents {{\n  multi_accept on;\n  use epoll;\n  worker_connections 16384;\n}}\n\n\
         stream {{\n  upstream kube_apiserver {{\n    least_conn;\n{servers}  }}\n\n  server {{\n    listen {LISTEN};\n    \
         proxy_pass kube_apiserver;\n    proxy_timeout 10m;\n    proxy_connect_timeout 1s;\n  }}\n}}\n",
        dir.display()
    )
}

/// Starts one of the others (not readyprism) in the node's namespace and waits until it accepts
/// connections on [`LISTEN`].
pub fn spawn_other(lab: &NetLab, balancer: Balancer) -> LabProcess {
    let mut cmd = match balancer {
        Balancer::Readyprism => panic!("readyprism is started by the cast"),
        Balancer::HaproxyKubespray | Balancer::HaproxyKubeprism => {
            let text = if balancer == Balancer::HaproxyKubespray {
                haproxy_kubespray()
            } else {
                haproxy_kubeprism()
            };
            let cfg = lab.path("haproxy.cfg");
            std::fs::write(&cfg, text).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            let mut cmd = lab.command(Host::Node, "haproxy");
            cmd.arg("-db").arg("-f").arg(&cfg);
            cmd
        }
        Balancer::NginxKubespray => {
            let cfg = lab.path("nginx.conf");
            std::fs::write(&cfg, nginx_kubespray(lab.dir()))
                .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            let mut cmd = lab.command(Host::Node, "nginx");
            cmd.arg("-p").arg(lab.dir()).arg("-c").arg(&cfg);
            cmd.args(["-g", "daemon off;"]);
            cmd
        }
    };
    cmd.env_remove("RUST_LOG");
    let proc = lab
        .spawn(balancer.program().unwrap_or("balancer"), cmd)
        .unwrap_or_else(|e| panic!("spawn {}: {e}", balancer.name()));
    let script = "import socket, sys; h, p = sys.argv[1].rsplit(':', 1); socket.create_connection((h, int(p)), timeout=1).close()";
    let up = poll(Duration::from_secs(10), || {
        lab.output(
            Host::Node,
            "python3",
            &["-c", script, LISTEN],
            &[],
            Duration::from_secs(5),
        )
        .is_ok_and(|o| o.status.success())
    });
    assert!(up, "{} did not start: {}", balancer.name(), proc.log_text());
    proc
}
