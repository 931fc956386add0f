//! A YAML parser error as one line at the exact field: `serde_path_to_error` knows the path, the
//! parser the line; a duplicated key, a bad list element and a bad scalar are pointed at where the
//! operator has to look, and the message stays on one line.
//!
//! Does not own errors found after parsing (`resolve`), nor scanning the text for a line (`locate`).

use super::{locate, ConfigError};

/// A parser error at the field that is wrong: `serde_path_to_error` knows the exact path (the
/// YAML parser alone stops at the parent for errors inside scalars), the parser knows the line.
pub(super) fn parse_error(
    src: &str,
    file: &str,
    e: serde_path_to_error::Error<yaml_serde::Error>,
) -> ConfigError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let (mut line, mut column) = inner.location().map_or((1, 1), |l| (l.line(), l.column()));
    // The parser writes " at line L column C" into the text; we put the position first instead,
    // and its own (sometimes shorter) path prefix gives way to the exact one.
    let text = inner.to_string();
    let text = text.replace(&format!(" at line {line} column {column}"), "");
    let message = match text.split_once(": ") {
        Some((p, rest)) if is_path(p) => rest.to_string(),
        _ => text,
    };
    let mut field = if path == "." { String::new() } else { path };
    // A bad map key (an empty zone name) is no field of its own: name the map.
    if let Some((parent, _)) = field.rsplit_once('.').filter(|(_, k)| k.trim().is_empty()) {
        field = parent.to_string();
    }
    // A duplicated key: the parser points at the mapping; point at the second occurrence.
    if let Some(key) = message
        .strip_prefix("duplicate field `")
        .and_then(|rest| rest.split('`').next())
    {
        let first = locate::key_line(src, key, line);
        if let Some(second) = first.and_then(|l| locate::key_line(src, key, l + 1)) {
            line = second;
            column = locate::indent(src, second) + 1;
        }
        field = if field.is_empty() {
            key.to_string()
        } else {
            format!("{field}.{key}")
        };
    } else if let Some(at) = locate::element(src, &field, &message, line) {
        // A bad list element: the parser points at the list, the message quotes the element.
        (line, column) = at;
    } else if let Some(key) = field.rsplit('.').next().filter(|k| is_key(k)) {
        // For a bad scalar the parser may point at the start of its mapping: find the key.
        if let Some(at) = locate::key_line(src, key, line) {
            if at != line {
                (line, column) = (at, locate::indent(src, at) + 1);
            }
        }
    }
    let message = if field.is_empty() {
        message
    } else {
        format!("{field}: {message}")
    };
    // A key or value may span lines (a multi-line plain scalar): the error stays one line.
    let message = message
        .chars()
        .flat_map(|c| match c {
            '\n' | '\r' | '\t' => c.escape_default().collect::<Vec<_>>(),
            c if c.is_control() => c.escape_unicode().collect(),
            c => vec![c],
        })
        .collect();
    ConfigError::Parse {
        file: file.to_string(),
        line,
        column,
        message,
    }
}

/// A plain key (`timeout`), not a list element (`backends[1]`).
fn is_key(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `health.timeout`, `backends[0].zone`: a field path as the parsers write them.
fn is_path(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || "_-.[]".contains(c))
}
