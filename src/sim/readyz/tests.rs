//! The health endpoints' rendering, against the bodies k8s.io/apiserver writes
//! (`pkg/server/healthz/healthz.go`, `handleRootHealth`).

use super::*;

/// Every check of [`CHECKS`] passing, but those named in `failing`.
fn all_but(failing: &[&str]) -> Vec<(&'static str, bool)> {
    CHECKS.iter().map(|&n| (n, !failing.contains(&n))).collect()
}

const ALL_OK: &str =
    "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]informer-sync ok\n\
    [+]poststarthook/start-apiserver-admission-initializer ok\n\
    [+]poststarthook/rbac/bootstrap-roles ok\n[+]shutdown ok\n";

#[test]
fn a_pass_is_a_bare_ok() {
    let answer = render(Endpoint::Readyz, &all_but(&[]), &Query::parse(None));
    assert_eq!(answer, (200, "ok".to_string()));
}

#[test]
fn a_verbose_pass_lists_every_check() {
    let answer = render(
        Endpoint::Readyz,
        &all_but(&[]),
        &Query::parse(Some("verbose")),
    );
    assert_eq!(answer, (200, format!("{ALL_OK}readyz check passed\n")));
    let with_value = render(
        Endpoint::Readyz,
        &all_but(&[]),
        &Query::parse(Some("verbose=false")),
    );
    assert_eq!(
        with_value.1, answer.1,
        "present is enough, as Go's Query()[\"verbose\"]"
    );
}

#[test]
fn a_failure_lists_every_check_with_its_reason_withheld() {
    let (status, body) = render(
        Endpoint::Readyz,
        &all_but(&ETCD_CHECKS),
        &Query::parse(None),
    );
    assert_eq!(status, 500);
    let want = ALL_OK
        .replace("[+]etcd ok", "[-]etcd failed: reason withheld")
        .replace(
            "[+]etcd-readiness ok",
            "[-]etcd-readiness failed: reason withheld",
        );
    assert_eq!(body, format!("{want}readyz check failed\n"));
    let checks = crate::verdict::FailingChecks::parse(body.as_bytes());
    assert_eq!(
        checks.to_string(),
        "etcd, etcd-readiness",
        "what the probe reads of it"
    );
}

#[test]
fn a_graceful_shutdown_fails_only_the_shutdown_check() {
    let (status, body) = render(Endpoint::Readyz, &all_but(&[SHUTDOWN]), &Query::parse(None));
    assert_eq!(status, 500);
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("[-]"))
            .collect::<Vec<_>>(),
        ["[-]shutdown failed: reason withheld"]
    );
    assert!(crate::verdict::FailingChecks::parse(body.as_bytes()).only_shutdown());
}

#[test]
fn an_excluded_check_cannot_fail_the_answer() {
    let failing = all_but(&["etcd"]);
    let (status, body) = render(
        Endpoint::Readyz,
        &failing,
        &Query::parse(Some("exclude=etcd")),
    );
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (_, verbose) = render(
        Endpoint::Readyz,
        &failing,
        &Query::parse(Some("verbose&exclude=etcd&exclude=log")),
    );
    assert!(
        verbose.starts_with("[+]ping ok\n[+]log excluded: ok\n[+]etcd excluded: ok\n"),
        "{verbose}"
    );
    assert!(verbose.ends_with("readyz check passed\n"), "{verbose}");
}

#[test]
fn excluding_an_unknown_check_warns_before_the_last_line() {
    let (status, body) = render(
        Endpoint::Readyz,
        &all_but(&["etcd"]),
        &Query::parse(Some("exclude=nope&exclude=a%2Fb")),
    );
    assert_eq!(status, 500);
    assert!(
        body.ends_with(
            "warn: some health checks cannot be excluded: no matches for \"a/b\",\"nope\"\n\
             readyz check failed\n"
        ),
        "{body}"
    );
}

#[test]
fn the_liveness_endpoints_run_no_readiness_only_check() {
    for endpoint in [Endpoint::Healthz, Endpoint::Livez] {
        let shutting = render(
            endpoint,
            &all_but(&[SHUTDOWN, "informer-sync"]),
            &Query::parse(None),
        );
        assert_eq!(shutting, (200, "ok".to_string()), "{endpoint:?}");
        let (status, body) = render(endpoint, &all_but(&ETCD_CHECKS), &Query::parse(None));
        assert_eq!(status, 500);
        assert!(body.contains("[-]etcd failed: reason withheld\n"), "{body}");
        assert!(!body.contains("etcd-readiness"), "{body}");
        assert!(
            body.ends_with(&format!("{} check failed\n", endpoint.name())),
            "{body}"
        );
    }
}
