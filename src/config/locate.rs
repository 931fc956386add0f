//! Finding the line of a key or value in the config text, for errors that serde cannot place.
//!
//! Cross-field rules (`timeout` < `interval`, unique addresses) are checked after parsing, when the
//! YAML positions are gone. This scans the text instead. It only has to be good enough to point an
//! operator at the right line; it does not own any parsing.

/// 1-based line of the first `key:` (as a whole word, block or flow style) at or after `from_line`.
pub fn key_line(src: &str, key: &str, from_line: usize) -> Option<usize> {
    src.lines()
        .enumerate()
        .skip(from_line.saturating_sub(1))
        .find(|(_, line)| has_key(strip_comment(line), key))
        .map(|(i, _)| i + 1)
}

/// 1-based line and column of the key a dotted field path ends in (`tls.ca`, `listen[1]`: each
/// key looked for after the line of its parent; indices ignored).
pub fn path_line(src: &str, path: &str) -> Option<(usize, usize)> {
    let mut line = 1;
    for segment in path.split('.') {
        let key = segment.split('[').next()?;
        line = key_line(src, key, line)?;
    }
    let last = path.rsplit('.').next()?.split('[').next()?;
    let column = src
        .lines()
        .nth(line - 1)
        .and_then(|l| l.find(&format!("{last}:")))
        .unwrap_or_else(|| indent(src, line))
        + 1;
    Some((line, column))
}

/// 1-based line of the `nth` (0-based) line whose content mentions `value` as a YAML scalar.
pub fn value_line(src: &str, value: &str, nth: usize) -> Option<usize> {
    src.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = strip_comment(line);
            line.contains(&format!("\"{value}\""))
                || line.contains(&format!("'{value}'"))
                || line
                    .split(|c: char| c.is_whitespace() || c == ',' || c == '{' || c == '}')
                    .any(|tok| tok == value)
        })
        .nth(nth)
        .map(|(i, _)| i + 1)
}

/// Line and column of the list element `field` (`zones.dc-a[1]`) whose bad value `message`
/// quotes first, looked for at or after `from_line` (where its list starts).
pub fn element(src: &str, field: &str, message: &str, from_line: usize) -> Option<(usize, usize)> {
    if !field.ends_with(']') {
        return None;
    }
    let value = message.split('"').nth(1).filter(|v| !v.is_empty())?;
    let line = (0..)
        .map_while(|nth| value_line(src, value, nth))
        .find(|&l| l >= from_line)?;
    let column = src.lines().nth(line - 1)?.find(value)? + 1;
    Some((line, column))
}

/// Leading spaces of 1-based `line` (0 when there is no such line).
pub fn indent(src: &str, line: usize) -> usize {
    src.lines()
        .nth(line.saturating_sub(1))
        .map_or(0, |l| l.len() - l.trim_start().len())
}

fn strip_comment(line: &str) -> &str {
    // A '#' starts a comment only after whitespace or at the start; good enough for our keys.
    match line.find(" #") {
        Some(i) => &line[..i],
        None if line.trim_start().starts_with('#') => "",
        None => line,
    }
}

fn has_key(line: &str, key: &str) -> bool {
    let mut rest = line;
    while let Some(i) = rest.find(key) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + key.len()..].trim_start();
        let boundary_before = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if boundary_before && after.starts_with(':') {
            return true;
        }
        rest = &rest[i + key.len()..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "connect_timeout: 1s\nhealth:\n  interval: 2s  # short\n  fast_interval: 1s\n  timeout: 3s\nbackends:\n  - { address: \"a:1\", zone: x }\n  - address: a:1\n";

    #[test]
    fn keys_are_matched_as_whole_words() {
        assert_eq!(key_line(SRC, "timeout", 1), Some(5));
        assert_eq!(key_line(SRC, "interval", 1), Some(3));
        assert_eq!(key_line(SRC, "fast_interval", 1), Some(4));
        assert_eq!(key_line(SRC, "zone", 1), Some(7));
        assert_eq!(key_line(SRC, "missing", 1), None);
    }

    #[test]
    fn values_are_found_in_either_yaml_style() {
        assert_eq!(value_line(SRC, "a:1", 0), Some(7));
        assert_eq!(value_line(SRC, "a:1", 1), Some(8));
    }

    #[test]
    fn a_bad_list_element_is_found_from_the_value_its_error_quotes() {
        let src =
            "zones:\n  dc-a:\n    - 10.0.1.0/24\n    - 10.0.2.5/24\n  dc-b: [\"10.0.2.5/24\"]\n";
        let message = "\"10.0.2.5/24\" has host bits set";
        assert_eq!(element(src, "zones.dc-a[1]", message, 3), Some((4, 7)));
        assert_eq!(element(src, "zones.dc-b[0]", message, 5), Some((5, 11)));
        assert_eq!(element(src, "zones.dc-b", message, 5), None);
    }

    #[test]
    fn a_dotted_path_is_found_under_its_parent_in_either_yaml_style() {
        let src = "ca: nope\nlisten: [\"127.0.0.1:1\"]\ntls:\n  client_cert: /c\n  ca: /ca\nx: { tls: { ca: /y } }\n";
        assert_eq!(path_line(src, "tls.ca"), Some((5, 3)));
        assert_eq!(path_line(src, "tls.client_cert"), Some((4, 3)));
        assert_eq!(path_line(src, "listen[0]"), Some((2, 1)));
        assert_eq!(path_line(src, "admin"), None);
        let flow = "tls: { client_cert: /c, ca: /ca }\n";
        assert_eq!(path_line(flow, "tls.ca"), Some((1, 25)));
    }
}
