//! The table's confirm probes, on a paused clock: one at once when asked, at most one per
//! interval, each counted.

use super::*;
use crate::backend::News;

#[tokio::test(start_paused = true)]
async fn a_confirm_probe_is_made_at_once_at_most_once_per_interval() {
    let (live, calls, _rx, cancel, handle) = ready_monitor(2, Duration::from_millis(10)).await;
    // 1 s after the first probe: the next is due at 4.5-5.5 s.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = Instant::now();
    live.inbox.tell(News::ConfirmAsked);
    poll_calls(&calls, 2).await;
    let probed = calls.lock().expect("calls")[1];
    assert!(probed - asked <= Duration::from_millis(1), "at once");
    assert_eq!(live.inbox.confirms_made(), 1);
    // Asked again within the interval: no second confirm; the scheduled probe answers it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    live.inbox.tell(News::ConfirmAsked);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        calls.lock().expect("calls").len(),
        2,
        "no probe before the schedule"
    );
    assert_eq!(live.inbox.confirms_made(), 1);
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}
