//! Text from a status document made safe and bounded for a terminal: control characters shown as
//! visible escapes, cells cut to a width. `readyprism status` prints what a backend or an endpoint
//! sent (a `/readyz` body line is a `last_error`), and that must not drive the terminal.
//!
//! Owns cutting cells and escaping JSON; the escape itself is `visible`'s. Does not own the
//! table's layout (`super`).

/// Widest cell: an address, a zone or a number never needs more.
pub const MAX_CELL: usize = 80;

/// Widest LAST ERROR cell: a reason keeps at most 200 characters of a body line (or 200 bytes of
/// failing checks' names), behind a short `HTTP 500: ` (`readyz 500: `) prefix.
pub const MAX_ERROR: usize = 220;

use crate::visible::bidi_control;
pub use crate::visible::escaped;

/// `text` escaped, then cut to `max` characters, the last one `…` when cut.
pub fn cell(text: &str, max: usize) -> String {
    let text = escaped(text);
    if text.chars().count() <= max {
        return text;
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A JSON text with every DEL, C1 control and bidirectional formatting character written as a
/// `\uXXXX` escape. In a valid JSON
/// document those can only stand inside strings, where the escape means the same character: the
/// document is unchanged, and a terminal shown it has nothing to act on. (C0 controls cannot
/// stand raw in valid JSON at all.)
pub fn json_escaped(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '\x7f' | '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if bidi_control(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidirectional_overrides_become_visible_escapes_in_cells_as_in_json() {
        let hostile = "ok \u{202e}rorre\u{202c} \u{2066}x\u{2069}\u{200f}\u{61c}";
        assert_eq!(
            escaped(hostile),
            "ok \\u{202e}rorre\\u{202c} \\u{2066}x\\u{2069}\\u{200f}\\u{61c}"
        );
        let json = serde_json::json!({ "e": hostile }).to_string();
        let safe = json_escaped(&json);
        assert!(!safe.chars().any(bidi_control), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still valid");
        assert_eq!(back["e"], hostile);
    }

    #[test]
    fn long_cells_are_cut_with_an_ellipsis_counted_in_characters() {
        assert_eq!(cell("short", 10), "short");
        assert_eq!(cell("ééééééééééé", 10), "ééééééééé…");
        assert_eq!(cell(&"x".repeat(500), MAX_CELL).chars().count(), MAX_CELL);
        // Escapes count toward the width: cutting happens after escaping.
        assert_eq!(cell("\x1b\x1b\x1b", 9), "\\x1b\\x1b…");
    }

    #[test]
    fn json_escaping_keeps_the_document() {
        let json = "{\"e\":\"a\u{9b}b\x7fc\"}";
        let escaped = json_escaped(json);
        assert_eq!(escaped, "{\"e\":\"a\\u009bb\\u007fc\"}");
        let (a, b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(json).expect("valid"),
            serde_json::from_str(&escaped).expect("still valid"),
        );
        assert_eq!(a, b);
    }
}
