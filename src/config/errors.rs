//! Configuration errors as a user reads them: the dotted key (from `serde_path_to_error`, with
//! array-of-table indices: `output.sink[1].baudrate`), the file and line that wrote it (found in
//! the text by its table and key, since the parser's spans are lost inside `[[output.sink]]`'s
//! tagged tables), the problem in plain words rather than Rust's types, and the fix (a misspelt
//! key's nearest valid key by `strsim`).

use serde::de::DeserializeOwned;

use crate::error::ConfigError;

/// Parse TOML `text` of `file` into a `T`, or an error naming the key, its line and the fix.
pub(super) fn parse_text<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| syntax_error(file, text, &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let (key, msg) = key_and_message(e.path(), e.inner().message());
        let line = line_of(text, &key).or_else(|| {
            e.inner()
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
        });
        let at = line
            .filter(|_| !msg.starts_with("missing field"))
            .map(|l| format!(" (line {l})"))
            .unwrap_or_default();
        described(file, &key, &msg, &at)
    })
}

/// Parse a merged table into a `T`; `wrote` says where the files wrote a key ("a.toml line 3").
pub(super) fn parse_table<T: DeserializeOwned>(
    table: toml::Table,
    file: &str,
    wrote: &dyn Fn(&str) -> Vec<String>,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let (key, msg) = key_and_message(e.path(), e.inner().message());
        let at = wrote(&key);
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(" (set in {})", at.join(", "))
        };
        described(file, &key, &msg, &at)
    })
}

/// A TOML syntax error: its line and the parser's words.
fn syntax_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
    ConfigError::new(
        file,
        "(syntax)",
        format!("{}{at}", e.message().trim()),
        "correct the TOML syntax at that line (strings need quotes, lists brackets)",
    )
}

/// The dotted key of an error at `path` with serde's `message` (an unknown or missing field is
/// named in the message, one level below the path), and the message in plain words.
fn key_and_message(path: &serde_path_to_error::Path, message: &str) -> (String, String) {
    let mut key = path.to_string();
    if key == "." || key == "?" {
        key.clear();
    }
    let named = ["unknown field", "missing field"]
        .iter()
        .any(|p| message.starts_with(p))
        .then(|| message.split('`').nth(1))
        .flatten();
    if let Some(field) = named {
        let last = key.rsplit(['.', ']']).next().unwrap_or("");
        if last != field {
            key = if key.is_empty() {
                field.to_string()
            } else {
                format!("{key}.{field}")
            };
        }
    }
    (key, plain(message))
}

/// Serde's message without Rust's vocabulary: `invalid type: string "abc", expected usize`
/// reads `"abc" is text, where a whole number (0 or more) is expected`.
pub(super) fn plain(message: &str) -> String {
    let m = message.trim();
    let Some((what, expected)) = m.split_once(", expected ") else {
        return m.to_string();
    };
    let expected = expected_in_words(expected);
    if let Some(v) = what.strip_prefix("invalid type: ") {
        let v = v
            .replace("string ", "")
            .replace("integer ", "")
            .replace("floating point ", "")
            .replace("boolean ", "")
            .replace('`', "");
        let kind = if what.contains("string") {
            "text"
        } else if what.contains("floating point") {
            "a number with a fraction"
        } else if what.contains("integer") {
            "a whole number"
        } else if what.contains("boolean") {
            "true or false"
        } else if what.contains("sequence") {
            "a list"
        } else if what.contains("map") {
            "a table"
        } else {
            "a value of another kind"
        };
        let v = if v == "sequence" || v == "map" {
            String::new()
        } else {
            format!("{v} ")
        };
        return format!("{v}is {kind}, where {expected} is expected");
    }
    if let Some(v) = what.strip_prefix("invalid value: ") {
        let v = v
            .replace("integer ", "")
            .replace("floating point ", "")
            .replace("string ", "")
            .replace('`', "");
        return format!("{v} is not {expected}");
    }
    if let Some(v) = what.strip_prefix("invalid length ") {
        return format!("a list of {v} values, where {expected} is expected");
    }
    format!("{what}; expected {expected}")
}

/// Serde's "expected" phrase in words.
fn expected_in_words(e: &str) -> String {
    let e = e.trim();
    let unsigned = ["usize", "u64", "u32", "u16", "u8"];
    let signed = ["isize", "i64", "i32", "i16", "i8"];
    if unsigned.contains(&e) {
        return "a whole number (0 or more)".into();
    }
    if signed.contains(&e) {
        return "a whole number".into();
    }
    if e == "f64" || e == "f32" {
        return "a number".into();
    }
    if e == "a boolean" {
        return "true or false".into();
    }
    if e == "a string" || e == "a borrowed string" {
        return "text in quotes".into();
    }
    if e == "a sequence" {
        return "a list in brackets, e.g. [1, 2]".into();
    }
    if let Some(n) = e
        .strip_prefix("an array of length ")
        .or_else(|| e.strip_prefix("a tuple of size "))
    {
        let example = (1..=n.parse::<usize>().unwrap_or(2).min(4))
            .map(|i| (i * 100).to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return format!("a list of {n} numbers, e.g. [{example}]");
    }
    if e.starts_with("struct ") || e == "a map" {
        return "a table".into();
    }
    e.replace("internally tagged enum ", "a table with a `kind` of ")
}

/// The ConfigError for `key` with problem `msg` (and where, `at`), with the fix that suits it.
fn described(file: &str, key: &str, msg: &str, at: &str) -> ConfigError {
    let fix = if msg.starts_with("unknown field") {
        match suggestion(key, msg) {
            Some(k) => format!("did you mean `{k}`? (the message lists the keys this table accepts)"),
            None => "remove the key or correct its spelling (the message lists the keys this table accepts)".into(),
        }
    } else if msg.starts_with("missing field") && key == "array" {
        "describe your array in an [array] table: sensor positions in metres in channel order (sensors_m) and the speed of sound (speed_of_sound_m_s); an installed /etc/sonotrack/sonotrack.toml has one to uncomment and edit. A board file is not a configuration by itself: include it from one (see boards/examples/)".into()
    } else if msg.starts_with("missing field") {
        "add the key (see the configuration reference in README.md)".into()
    } else if msg.starts_with("unknown variant") {
        "use one of the values the message lists".into()
    } else {
        "give the value in the form the message says".into()
    };
    let key = if key.is_empty() { "(file)" } else { key };
    ConfigError::new(file, key, format!("{msg}{at}"), fix)
}

/// For an unknown key, the accepted key nearest to it (at most 3 edits away).
fn suggestion(key: &str, msg: &str) -> Option<String> {
    let field = key.rsplit('.').next()?;
    let expected = msg.split("expected").nth(1)?;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|k| (strsim::damerau_levenshtein(field, k), k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.to_string())
}

/// The line of `text` that writes `key` (`output.sink[1].baud`: `baud` in the second
/// `[[output.sink]]` table), or the line of its table's header when the key itself is not
/// written there (a missing key).
pub(super) fn line_of(text: &str, key: &str) -> Option<usize> {
    if key.is_empty() {
        return None;
    }
    let (section, field) = match key.rsplit_once('.') {
        Some((s, f)) => (s.to_string(), f),
        None => (String::new(), key),
    };
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut current = String::new();
    let mut header_line = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.split('#').next().unwrap_or("").trim();
        if let Some(h) = t.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            let h = h.trim().to_string();
            let n = counts.entry(h.clone()).or_insert(0);
            current = format!("{h}[{n}]");
            *n += 1;
        } else if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = with_indices(h.trim(), &counts);
        } else if let Some((ks, kf)) = written_key(&current, t) {
            if ks == section && kf == field {
                return Some(i + 1);
            }
            continue;
        } else {
            continue;
        }
        if current == key || (current == section && header_line.is_none() && field.is_empty()) {
            header_line = Some(i + 1);
        }
    }
    header_line
}

/// The table and key a `key = value` line `t` writes inside table `current` (dotted keys
/// reach into sub-tables); None for any other line.
pub(super) fn written_key<'a>(current: &str, t: &'a str) -> Option<(String, &'a str)> {
    let (k, _) = t.split_once('=')?;
    let k = k.trim().trim_matches('"');
    Some(match k.rsplit_once('.') {
        Some((a, b)) if current.is_empty() => (a.to_string(), b),
        Some((a, b)) => (format!("{current}.{a}"), b),
        None => (current.to_string(), k),
    })
}

/// A `[a.b]` header inside an array of tables `[[a]]` belongs to its latest element: `a[n].b`.
fn with_indices(header: &str, counts: &std::collections::BTreeMap<String, usize>) -> String {
    let mut out = String::new();
    let mut prefix = String::new();
    for part in header.split('.') {
        if !prefix.is_empty() {
            prefix.push('.');
            out.push('.');
        }
        prefix.push_str(part);
        out.push_str(part);
        if let Some(n) = counts.get(&prefix) {
            out.push_str(&format!("[{}]", n.saturating_sub(1)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_in_plain_words() {
        assert_eq!(
            plain("invalid type: string \"abc\", expected usize"),
            "\"abc\" is text, where a whole number (0 or more) is expected"
        );
        assert_eq!(
            plain("invalid value: integer `-5`, expected usize"),
            "-5 is not a whole number (0 or more)"
        );
        assert_eq!(
            plain("invalid type: floating point `5.5`, expected usize"),
            "5.5 is a number with a fraction, where a whole number (0 or more) is expected"
        );
        assert_eq!(
            plain("invalid type: string \"[1,2\", expected an array of length 2"),
            "\"[1,2\" is text, where a list of 2 numbers, e.g. [100, 200] is expected"
        );
        assert!(!plain("invalid type: integer `3`, expected f64").contains("f64"));
    }

    #[test]
    fn lines_of_keys_in_arrays_of_tables() {
        let text = "[array]\nsensors_m = []\n\n[[output.sink]]\nkind = \"udp\"\n\n[[output.sink]]\nkind = \"serial\"\nbaudrate = 9600\n[[tracker.models]]\nname = \"a\"\n";
        assert_eq!(line_of(text, "output.sink[1].baudrate"), Some(9));
        assert_eq!(line_of(text, "output.sink[0].kind"), Some(5));
        assert_eq!(line_of(text, "array.sensors_m"), Some(2));
        assert_eq!(line_of(text, "tracker.models[0].name"), Some(11));
        assert_eq!(line_of(text, "output.sink[1]"), Some(7));
        assert_eq!(line_of(text, "gcc.window"), None);
    }
}
