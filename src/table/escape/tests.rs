//! The escape decision, table-tested: close only after a pass that started after the fall.

use std::time::Duration;

use super::*;

#[test]
fn judge_closes_only_after_a_pass_that_started_after_the_fall() {
    let fell = Instant::now();
    let before = fell - Duration::from_millis(1);
    let after = fell + Duration::from_millis(1);
    let cases = [
        ("no pass known, not asked: ask", None, false, Verdict::Ask),
        ("no pass known, asked: wait", None, true, Verdict::Wait),
        (
            "a pass before the fall: ask",
            Some(before),
            false,
            Verdict::Ask,
        ),
        (
            "a pass before the fall, asked: wait",
            Some(before),
            true,
            Verdict::Wait,
        ),
        (
            "a pass at the fall: not after",
            Some(fell),
            true,
            Verdict::Wait,
        ),
        (
            "a pass after the fall: close",
            Some(after),
            false,
            Verdict::Close,
        ),
        (
            "a pass after the fall, asked: close",
            Some(after),
            true,
            Verdict::Close,
        ),
    ];
    for (name, passed, asked, want) in cases {
        assert_eq!(judge(fell, passed, asked), want, "{name}");
    }
}
