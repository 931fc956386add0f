//! Property tests: the picker's promises over any set of backends, and the config parser over any
//! input.

use std::time::Duration;

use proptest::prelude::*;
use readyprism::config::Config;
use readyprism::pick::{fallback, pick, Candidate, Pick, WhenNoneReady};
use readyprism::verdict::{Reach, State};

/// How far a check got: none, a connection, or an answer (ready or not, draining or not).
fn reach() -> impl Strategy<Value = Reach> {
    prop_oneof![
        Just(Reach::Unreached),
        Just(Reach::Connected),
        (
            prop_oneof![Just(200u16), Just(500), Just(429)],
            any::<bool>(),
            0u64..200_000
        )
            .prop_map(|(status, draining, us)| {
                let latency = Duration::from_micros(us);
                if draining {
                    Reach::draining(status, latency)
                } else {
                    Reach::answered(status, latency)
                }
            }),
    ]
}

fn candidate() -> impl Strategy<Value = Candidate> {
    (
        prop_oneof![
            Just(State::Unknown),
            Just(State::Ready),
            Just(State::Unready)
        ],
        reach(),
        any::<bool>(),
        proptest::option::of(0u64..200_000),
        0usize..50,
    )
        .prop_map(|(state, reach, local, us, active)| Candidate {
            state,
            reach: (state != State::Unknown).then_some(reach),
            local,
            latency: us.map(Duration::from_micros),
            active,
            paced: false,
            degraded: false,
        })
}

fn policy() -> impl Strategy<Value = WhenNoneReady> {
    prop_oneof![Just(WhenNoneReady::FailOpen), Just(WhenNoneReady::Refuse)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_a_non_ready_backend_while_one_is_ready(
        cands in proptest::collection::vec(candidate(), 0..12), policy in policy(), rr in 0usize..100
    ) {
        let any_ready = cands.iter().any(|c| c.state == State::Ready);
        match pick(&cands, policy, rr) {
            Pick::Ready(order) => {
                prop_assert!(any_ready);
                prop_assert!(order.iter().all(|&i| cands[i].state == State::Ready));
            }
            Pick::NoneReady(order) => {
                prop_assert!(!any_ready);
                prop_assert!(!order.is_empty());
                if policy == WhenNoneReady::Refuse {
                    prop_assert!(order.iter().all(|&i| cands[i].state == State::Unknown));
                }
            }
            Pick::Refuse => prop_assert!(!any_ready),
        }
    }

    #[test]
    fn same_zone_first_within_each_part(
        cands in proptest::collection::vec(candidate(), 0..12), policy in policy(), rr in 0usize..100
    ) {
        let order = pick(&cands, policy, rr).order().to_vec();
        // Within one state (a part of the order), no local backend follows a remote one.
        for part in [State::Ready, State::Unknown] {
            let locals: Vec<bool> = order.iter().filter(|&&i| cands[i].state == part).map(|&i| cands[i].local).collect();
            prop_assert!(locals.windows(2).all(|w| w[0] || !w[1]), "{part:?}: {locals:?}");
        }
    }

    #[test]
    fn pacing_only_moves_paced_ready_backends_behind_the_others(
        cands in proptest::collection::vec(candidate(), 0..12),
        paced in proptest::collection::vec(any::<bool>(), 12),
        policy in policy(), rr in 0usize..100
    ) {
        let unpaced = pick(&cands, policy, rr);
        let marked: Vec<Candidate> = cands.iter().zip(&paced).map(|(c, &p)| Candidate { paced: p, ..*c }).collect();
        let got = pick(&marked, policy, rr);
        match (&unpaced, &got) {
            (Pick::Ready(before), Pick::Ready(after)) => {
                // The order without pacing, split stably: the unpaced ready ones, then the paced.
                let (mut want, behind): (Vec<usize>, Vec<usize>) = before.iter().partition(|&&i| !paced[i]);
                want.extend(behind);
                prop_assert_eq!(after, &want);
            }
            // Pacing marks only matter among ready backends.
            _ => prop_assert_eq!(&unpaced, &got),
        }
    }

    #[test]
    fn degraded_ready_backends_follow_the_healthy_ones_and_nothing_else_moves(
        cands in proptest::collection::vec(candidate(), 0..12),
        degraded in proptest::collection::vec(any::<bool>(), 12),
        policy in policy(), rr in 0usize..100
    ) {
        let healthy = pick(&cands, policy, rr);
        let marked: Vec<Candidate> = cands.iter().zip(&degraded).map(|(c, &d)| Candidate { degraded: d, ..*c }).collect();
        let got = pick(&marked, policy, rr);
        match (&healthy, &got) {
            (Pick::Ready(before), Pick::Ready(after)) => {
                // The same backends (nothing dropped or closed), split stably: healthy, then degraded.
                let (mut want, behind): (Vec<usize>, Vec<usize>) = before.iter().partition(|&&i| !degraded[i]);
                want.extend(behind);
                prop_assert_eq!(after, &want);
            }
            // Degraded marks only matter among ready backends: failing open is unchanged.
            _ => prop_assert_eq!(&healthy, &got),
        }
    }

    #[test]
    fn order_is_stable_under_equal_input(
        cands in proptest::collection::vec(candidate(), 0..12), policy in policy(), rr in 0usize..100
    ) {
        prop_assert_eq!(pick(&cands, policy, rr), pick(&cands, policy, rr));
        prop_assert_eq!(fallback(&cands, policy, rr), fallback(&cands, policy, rr));
    }

    #[test]
    fn every_ready_backend_is_reachable(
        cands in proptest::collection::vec(candidate(), 1..12), policy in policy(), rr in 0usize..100
    ) {
        // Each pick lists every ready backend exactly once: none is ever unreachable by retry.
        if let Pick::Ready(order) = pick(&cands, policy, rr) {
            let mut got = order.clone();
            got.sort_unstable();
            let want: Vec<usize> = (0..cands.len()).filter(|&i| cands[i].state == State::Ready).collect();
            prop_assert_eq!(got, want);
            // ... and with fail_open the rest follow, each once.
            let mut all = order;
            all.extend(fallback(&cands, policy, rr));
            all.sort_unstable();
            all.dedup();
            if policy == WhenNoneReady::FailOpen {
                prop_assert_eq!(all.len(), cands.len());
            }
        }
    }

    #[test]
    fn any_config_text_gives_a_config_or_one_error_line(text in ".{0,400}") {
        if let Err(e) = Config::parse(&text, "prop.yaml") {
            let line = e.to_string();
            prop_assert!(!line.contains('\n'), "{line:?}");
            prop_assert!(line.starts_with("prop.yaml"), "{line:?}");
        }
    }

    #[test]
    fn any_config_shaped_text_gives_a_config_or_one_error_line(
        lines in proptest::collection::vec(config_line(), 0..16)
    ) {
        let text = lines.join("\n");
        if let Err(e) = Config::parse(&text, "prop.yaml") {
            let line = e.to_string();
            prop_assert!(!line.contains('\n'), "{line:?}");
            prop_assert!(line.starts_with("prop.yaml"), "{line:?}");
        }
    }
}

/// Lines that look like the config: real keys, plausible and hostile values, odd indentation.
fn config_line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("listen"),
        Just("admin"),
        Just("zone"),
        Just("backends"),
        Just("health"),
        Just("  interval"),
        Just("  timeout"),
        Just("  fast_interval"),
        Just("  rise"),
        Just("  fall"),
        Just("  path"),
        Just("tls"),
        Just("  ca"),
        Just("  client_cert"),
        Just("connect_timeout"),
        Just("when_none_ready"),
        Just("shutdown_grace"),
        Just("  - address"),
        Just("    zone"),
        Just("allow_remote_admin"),
        Just("bogus"),
    ];
    let value = prop_oneof![
        Just("5s".to_string()),
        Just("-1s".to_string()),
        Just("17000000000000000000s".to_string()),
        Just("[\"127.0.0.1:7445\"]".to_string()),
        Just("\"[::1]:0\"".to_string()),
        Just("10.0.0.1:6443".to_string()),
        Just("fd00::1:6443".to_string()),
        Just("refuse".to_string()),
        Just("0".to_string()),
        Just("{".to_string()),
        Just("".to_string()),
        "[a-z0-9:./\\[\\]\"-]{0,24}",
    ];
    (key, value).prop_map(|(k, v)| format!("{k}: {v}"))
}
