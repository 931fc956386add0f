//! Text a peer sent, made safe to show: every control character written as a visible escape. An
//! apiserver's `/readyz` body becomes a probe's reason, and a reason reaches the log, `/status`,
//! the page and a terminal; none of them may be driven by it.
//!
//! Owns which characters are escaped and how. Does not own cutting text to a width
//! (`admin::status::cell`) or where a reason comes from (`https::reason`).

/// Unicode's bidirectional formatting characters (ALM, LRM, RLM, the embeddings and overrides
/// U+202A–U+202E, the isolates U+2066–U+2069): shown raw they reorder what the terminal displays,
/// so a backend's error text could make a line read as something it is not.
pub fn bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every C0 control, DEL, C1 control and bidirectional formatting character written as
/// a visible escape (`\x1b`, `\x7f`, `\u{9b}`, `\u{202e}`), so it cannot move the cursor, set the
/// title, clear the screen or reorder what is shown.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\0'..='\x1f' | '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{80}'..='\u{9f}' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c if bidi_control(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_controls_become_visible_escapes() {
        let hostile = "HTTP 500: \x1b]0;owned\x07\x1b[2J\u{9b}31m\x7f é\t✓";
        assert_eq!(
            escaped(hostile),
            "HTTP 500: \\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m\\x7f é\\x09✓"
        );
    }

    #[test]
    fn bidirectional_overrides_become_visible_escapes() {
        let hostile = "ok \u{202e}rorre\u{202c} \u{2066}x\u{2069}\u{200f}\u{61c}";
        assert_eq!(
            escaped(hostile),
            "ok \\u{202e}rorre\\u{202c} \\u{2066}x\\u{2069}\\u{200f}\\u{61c}"
        );
    }
}
