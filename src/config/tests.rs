//! Unit tests for config resolution: defaults, overrides and the position of every kind of error.

use super::*;

const MINIMAL: &str = "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\n";

fn err(src: &str) -> String {
    Config::parse(src, "node.yaml")
        .expect_err("should be rejected")
        .to_string()
}

#[test]
fn defaults_are_filled_in() {
    let c = Config::parse(MINIMAL, "node.yaml").expect("valid");
    assert_eq!(
        c.listen,
        vec!["127.0.0.1:7445".parse::<SocketAddr>().expect("addr")]
    );
    assert_eq!(c.admin.to_string(), "127.0.0.1:7446");
    assert_eq!(c.health.interval, Duration::from_secs(5));
    assert_eq!(c.health.timeout, Duration::from_secs(3));
    assert_eq!(c.health.fast_interval, Duration::from_secs(1));
    assert_eq!(
        c.health.remote_interval, c.health.interval,
        "the remote cadence off"
    );
    assert_eq!((c.health.rise, c.health.fall), (2, 2));
    assert_eq!(c.health.path, "/readyz");
    assert_eq!(c.health.request_check_interval, Duration::from_secs(30));
    assert_eq!(c.health.request_check_path, "/version");
    assert_eq!(c.routing.connect_timeout, Duration::from_secs(1));
    assert_eq!(c.shutdown_grace, Duration::from_secs(5));
    assert_eq!(c.routing.handoff_window, Duration::from_secs(5));
    assert_eq!(c.routing.probe_interval, c.health.interval);
    assert_eq!(
        c.routing.when_none_ready,
        crate::pick::WhenNoneReady::FailOpen
    );
    assert_eq!(c.tls.client_cert, None);
    assert_eq!(server_name_text(&c.backends[0].server_name), "10.0.1.10");
}

#[test]
fn dead_path_timeout_is_ten_seconds_unless_set() {
    let at = |extra: &str| {
        Config::parse(&format!("{MINIMAL}{extra}"), "node.yaml")
            .expect("valid")
            .routing
            .dead_path_timeout
    };
    assert_eq!(at(""), Some(Duration::from_secs(10)));
    assert_eq!(at("dead_path_timeout: 4s\n"), Some(Duration::from_secs(4)));
    assert_eq!(at("dead_path_timeout: 2s\n"), Some(Duration::from_secs(2)));
    assert_eq!(
        at("dead_path_timeout: 2m\n"),
        Some(Duration::from_secs(120))
    );
    assert_eq!(at("dead_path_timeout: 0s\n"), None, "0 turns it off");
}

#[test]
fn dead_path_timeout_prints_as_it_was_set() {
    for (extra, printed) in [
        ("", "dead_path_timeout: 10s"),
        ("dead_path_timeout: 0s\n", "dead_path_timeout: 0s"),
        ("dead_path_timeout: 3s\n", "dead_path_timeout: 3s"),
    ] {
        let c = Config::parse(&format!("{MINIMAL}{extra}"), "node.yaml").expect("valid");
        let yaml = c.to_yaml().expect("printable");
        assert!(yaml.contains(printed), "{extra:?}: {yaml}");
        assert_eq!(Config::parse(&yaml, "b.yaml").expect("valid"), c);
    }
}

#[test]
fn resolved_form_parses_back_to_the_same_config() {
    let src = "zone: dc-a\nlisten: [\"127.0.0.1:7445\", \"[::1]:7445\"]\nbackends:\n  - { address: \"[fd00::1]:6443\", zone: dc-a }\n  - { address: \"api.example:6443\", server_name: kubernetes }\ntls:\n  ca: /ca.crt\n  client_cert: /kubelet.pem\n";
    let c = Config::parse(src, "a.yaml").expect("valid");
    assert_eq!(c.backends[0].host, "fd00::1");
    assert_eq!(c.tls.client_key.as_deref(), Some(Path::new("/kubelet.pem")));
    let again =
        Config::parse(&c.to_yaml().expect("printable"), "b.yaml").expect("printed form is valid");
    assert_eq!(again, c);
}

#[test]
fn errors_name_where_they_are() {
    let cases = [
        // (config, expected substrings)
        ("backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca\nlisen: []\n", vec!["node.yaml:5:1", "unknown field `lisen`"]),
        (
            "backends:\n  - address: 10.0.1.10:6443\n    zon: a\ntls:\n  ca: /ca\n",
            vec!["node.yaml:3:", "backends[0]", "unknown field `zon`"],
        ),
        (
            "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca\nhealth:\n  interval: 5x\n",
            vec!["node.yaml:6:", "health.interval", "invalid duration"],
        ),
        (
            "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca\nhealth:\n  interval: 2s\n  timeout: 3s\n",
            vec!["node.yaml:7:", "health.timeout", "less than health.interval"],
        ),
        (
            "backends:\n  - address: 10.0.1.10:6443\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca\n",
            vec!["node.yaml:3:", "backends[1].address", "twice"],
        ),
        ("backends:\n  - address: fd00::1:6443\ntls:\n  ca: /ca\n", vec!["node.yaml:2:", "backends[0].address", "brackets"]),
        ("backends:\n  - address: 10.0.1.10\ntls:\n  ca: /ca\n", vec!["node.yaml:2:", "backends[0].address", "host:port"]),
        ("backends: []\ntls:\n  ca: /ca\n", vec!["node.yaml:1:", "backends", "at least one"]),
        ("tls:\n  ca: /ca\n", vec!["node.yaml:1:", "backends", "required"]),
        ("backends:\n  - address: a:1\n", vec!["node.yaml:1:", "tls.ca", "required"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nlisten: [\"localhost:7445\"]\n", vec!["node.yaml:5:", "listen[0]", "not an IP socket address"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  rise: 0\n", vec!["node.yaml:6:", "health.rise", "at least 1"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  fall: 1000000\n", vec!["node.yaml:6:", "health.fall", "1000000 is more than the maximum of 10"]),
        ("backends:\n  - address: 127.0.0.1:7445\ntls:\n  ca: /ca\n", vec!["node.yaml:2:", "backends[0].address", "own listen address", "it would relay to itself"]),
        ("backends:\n  - address: a:1\n  - address: \"[::ffff:127.0.0.1]:7445\"\ntls:\n  ca: /ca\n", vec!["node.yaml:3:", "backends[1].address", "own listen address", "it would relay to itself"]),
        ("backends:\n  - address: 127.0.0.1:7446\ntls:\n  ca: /ca\n", vec!["node.yaml:2:", "backends[0].address", "own admin address", "its admin server"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nwhen_none_ready: maybe\n", vec!["node.yaml:5:", "when_none_ready", "unknown variant"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  rise: -1\n", vec!["node.yaml:6:", "health.rise"]),
        ("backends: [\n", vec!["node.yaml:2:"]),
        ("listen: [\"127.0.0.1:7445\", \"127.0.0.1:7445\"]\nbackends:\n  - address: a:1\ntls:\n  ca: /ca\n", vec!["node.yaml:1:", "listen[1]", "twice"]),
        ("listen: [\"127.0.0.1:7445\"]\nadmin: \"127.0.0.1:7445\"\nbackends:\n  - address: a:1\ntls:\n  ca: /ca\n", vec!["node.yaml:2:", "admin", "also a listen address"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  path: \"/readyz?x=<bad>\"\n", vec!["node.yaml:6:", "health.path", "URI"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  interval: 17000000000000000000s\n", vec!["node.yaml:6:", "health.interval", "maximum of 10m"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nshutdown_grace: 18446744073709551615s\n", vec!["node.yaml:5:", "shutdown_grace", "maximum"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nconnect_timeout: 2m\n", vec!["node.yaml:5:", "connect_timeout", "maximum of 1m"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\ndead_path_timeout: 1s\n", vec!["node.yaml:5:", "dead_path_timeout", "1s is outside 2s..2m"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\ndead_path_timeout: 121s\n", vec!["node.yaml:5:", "dead_path_timeout", "121s is outside 2s..2m", "0s"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\ndead_path_timeout: 10\n", vec!["node.yaml:5:", "dead_path_timeout: invalid duration"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhandoff_window: 11m\n", vec!["node.yaml:5:", "handoff_window", "maximum of 10m"]),
        ("admin: \"0.0.0.0:7446\"\nbackends:\n  - address: a:1\ntls:\n  ca: /ca\n", vec!["node.yaml:1:", "admin", "not a loopback address", "allow_remote_admin"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  interval: 2s\n  timeout: 1s\n  fast_interval: 3s\n", vec!["node.yaml:8:", "health.fast_interval", "must not exceed health.interval"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  fall: 0\n", vec!["node.yaml:6:", "health.fall", "at least 1"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  interval: 5s\n  remote_interval: 4s\n", vec!["node.yaml:7:", "health.remote_interval", "4s must not be less than health.interval (5s)"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  remote_interval: 11m\n", vec!["node.yaml:6:", "health.remote_interval", "maximum of 10m"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  request_check_interval: 10s\n", vec!["node.yaml:6:", "health.request_check_interval", "10s is less than the minimum of 30s", "0s turns the checks off"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  request_check_interval: 11m\n", vec!["node.yaml:6:", "health.request_check_interval", "maximum of 10m"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  rise: 2\n  request_check_path: version\n", vec!["node.yaml:7:", "health.request_check_path", "must start with '/'"]),
        ("backends:\n  - address: \"[fd00::zz]:6443\"\ntls:\n  ca: /ca\n", vec!["node.yaml:2:", "backends[0].address", "not an IPv6 address"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  interval: 5\n", vec!["node.yaml:6:", "health.interval", "invalid duration"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  interval: 5 s\n", vec!["node.yaml:6:", "health.interval", "invalid duration"]),
        // Found by fuzzing: an unknown key spanning lines (in a flow mapping) stays one line.
        ("{\n/8\n\n\tJ \"J L", vec!["node.yaml:", "unknown field"]),
        // At the field that is wrong, not its parent or neighbour:
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  interval: 5s\n  timeout: -1s\n", vec!["node.yaml:7:", "health.timeout: invalid duration"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  path: /readyz\n  interval: 5sec\n", vec!["node.yaml:7:", "health.interval: invalid duration"]),
        ("listen: [\"127.0.0.1:7445\"]\nbackends:\n  - address: a:1\ntls:\n  ca: /ca\nconnect_timeout: 5h3\n", vec!["node.yaml:6:", "connect_timeout: invalid duration"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nbackends:\n  - address: b:1\n", vec!["node.yaml:5:1:", "backends: duplicate field `backends`"]),
        ("backends:\n  - address: a:1\ntls:\n  ca: /ca\nhealth:\n  rise: 1\n  rise: 2\n", vec!["node.yaml:7:3:", "health.rise: duplicate field `rise`"]),
    ];
    for (src, wants) in cases {
        let e = err(src);
        for want in wants {
            assert!(
                e.contains(want),
                "error {e:?} should contain {want:?} (config {src:?})"
            );
        }
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
}

#[test]
fn a_remote_admin_address_needs_the_explicit_flag() {
    let src = format!("admin: \"0.0.0.0:7446\"\nallow_remote_admin: true\n{MINIMAL}");
    let c = Config::parse(&src, "node.yaml").expect("allowed explicitly");
    assert!(c.allow_remote_admin);
    assert!(c
        .to_yaml()
        .expect("printable")
        .contains("allow_remote_admin: true"));
}

#[test]
fn a_static_backend_at_a_host_address_on_a_wildcard_listen_port_is_refused_on_that_host() {
    let src =
        format!("listen: [\"0.0.0.0:7445\"]\n{MINIMAL}").replace("10.0.1.10:6443", "10.0.0.5:7445");
    assert!(
        Config::parse(&src, "node.yaml").is_ok(),
        "elsewhere: not known as own"
    );
    let here = ["10.0.0.5".parse().expect("literal")];
    let e = Config::parse_on(&src, "node.yaml", &here)
        .expect_err("own")
        .to_string();
    assert!(e.starts_with("node.yaml:3: backends[0].address:"), "{e}");
    assert!(e.contains("own listen address"), "{e}");
}

#[test]
fn status_file_defaults_to_var_lib_accepting_off_or_an_absolute_path() {
    let c = Config::parse(MINIMAL, "node.yaml").expect("valid");
    assert_eq!(
        c.status_file.as_deref(),
        Some(Path::new(DEFAULT_STATUS_FILE))
    );
    let off = Config::parse(&format!("{MINIMAL}status_file: \"\"\n"), "node.yaml").expect("off");
    assert_eq!(off.status_file, None);
    assert_eq!(
        Config::parse(&off.to_yaml().expect("printable"), "b.yaml").expect("printed"),
        off,
        "off stays off in the printed form"
    );
    let set = Config::parse(
        &format!("{MINIMAL}status_file: /run/rp/s.json\n"),
        "node.yaml",
    )
    .expect("set");
    assert_eq!(
        set.status_file.as_deref(),
        Some(Path::new("/run/rp/s.json"))
    );
    for (value, why) in [
        ("status.json", "must be an absolute path"),
        ("/var/lib/readyprism/", "must name a file"),
    ] {
        let e = err(&format!("{MINIMAL}status_file: {value}\n"));
        assert!(e.starts_with("node.yaml:5"), "{e}");
        assert!(e.contains("status_file"), "{e}");
        assert!(e.contains(why), "{e}");
    }
}
