//! Reading configuration files: includes merged underneath the including file, and TOML errors
//! turned into messages that name the file, the dotted key and the fix.

use std::path::{Path, PathBuf};

use crate::error::{ConfigError, IoContext, Result};

/// Largest configuration file read (a configuration is a few kilobytes; this stops a path such
/// as /dev/zero or a log file from being read whole).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Deepest chain of includes.
pub const MAX_INCLUDE_DEPTH: usize = 8;
/// Most files one configuration may read, its includes' includes counted each time.
pub const MAX_CONFIG_FILES: usize = 64;

/// Where an include walk is: the chain of files that led here, and how many were read.
#[derive(Default)]
pub(super) struct IncludeWalk {
    stack: Vec<PathBuf>,
    files: usize,
    /// Every file read and its text, in the order read.
    pub texts: Vec<(PathBuf, String)>,
}

impl IncludeWalk {
    /// Where the files read set `key` (dotted, as errors name it): "a.toml line 3", for each
    /// file and line whose table and key match.
    pub fn where_set(&self, key: &str) -> Vec<String> {
        let key = key.split(" (").next().unwrap_or(key);
        let (section, field) = match key.rsplit_once('.') {
            Some((s, f)) => (s, f),
            None => ("", key),
        };
        // `tracker.models[2].name` is found as `name` in a `[[tracker.models]]` table.
        let section = section.split('[').next().unwrap_or(section);
        let field = field.split('[').next().unwrap_or(field);
        let mut found = Vec::new();
        for (path, text) in &self.texts {
            let mut current = String::new();
            for (i, line) in text.lines().enumerate() {
                let t = line.trim();
                if t.starts_with('[') {
                    current = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
                    continue;
                }
                let Some((ks, kf)) = super::errors::written_key(&current, t) else {
                    continue;
                };
                if ks == section && kf == field {
                    found.push(format!("{} line {}", path.display(), i + 1));
                }
            }
        }
        found
    }
}

/// A configuration file's text: a regular file of at most [`MAX_CONFIG_BYTES`].
fn read_config_text(path: &Path) -> Result<String> {
    use std::io::Read;
    let file = path.display().to_string();
    let meta = std::fs::metadata(path).at(path)?;
    if !meta.is_file() {
        return Err(ConfigError::new(
            &file,
            "(file)",
            "is not a regular file (a device, a directory or a pipe)",
            "give the path of a TOML configuration file",
        )
        .into());
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .at(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| {
            ConfigError::new(
                &file,
                "(file)",
                format!("cannot be read as UTF-8 text: {e}"),
                "give a TOML configuration file",
            )
        })?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::new(
            &file,
            "(file)",
            format!("is larger than {MAX_CONFIG_BYTES} bytes"),
            "a configuration is a few kilobytes: check the path",
        )
        .into());
    }
    Ok(text)
}

/// Read a TOML file into a table, merging its `include`s underneath it. The flag says whether
/// anything was merged.
pub(super) fn load_table(path: &Path, walk: &mut IncludeWalk) -> Result<(toml::Table, bool)> {
    let file = path.display().to_string();
    let canon = path.canonicalize().at(path)?;
    if walk.stack.contains(&canon) {
        return Err(ConfigError::new(
            &file,
            "include",
            "the file includes itself (directly or through others)",
            "remove the cycle",
        )
        .into());
    }
    walk.files += 1;
    if walk.files > MAX_CONFIG_FILES || walk.stack.len() > MAX_INCLUDE_DEPTH {
        return Err(ConfigError::new(
            &file,
            "include",
            format!(
                "the includes go {} deep and read {} files (at most {MAX_INCLUDE_DEPTH} deep and \
                 {MAX_CONFIG_FILES} files)",
                walk.stack.len(),
                walk.files
            ),
            "include each file once, from the top-level configuration",
        )
        .into());
    }
    let text = read_config_text(path)?;
    let mut table: toml::Table = super::errors::parse_text(&text, &file)?;
    walk.texts.push((path.to_path_buf(), text));
    let includes = match table.get("include") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .filter(|s| !s.trim().is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| {
                        ConfigError::new(
                            &file,
                            "include",
                            format!("entry {v} is not a path"),
                            "write include = [\"../boards/agx-orin.toml\"]",
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(ConfigError::new(
                &file,
                "include",
                "must be a list of paths",
                "write include = [\"../boards/agx-orin.toml\"]",
            )
            .into());
        }
    };
    table.remove("include");
    if includes.is_empty() {
        return Ok((table, false));
    }
    walk.stack.push(canon);
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut base = toml::Table::new();
    for inc in includes {
        let target = dir.join(&inc);
        if !target.exists() {
            return Err(ConfigError::new(
                &file,
                "include",
                format!("`{inc}` ({}) does not exist", target.display()),
                "correct the path (relative paths start from this file's directory), or remove the entry",
            )
            .into());
        }
        let (sub, _) = load_table(&target, walk)?;
        merge(&mut base, sub);
    }
    walk.stack.pop();
    merge(&mut base, table);
    Ok((base, true))
}

/// Merge `over` into `base`: tables merge key by key; `[[output.sink]]` lists add up (the
/// included file's outputs first, then this file's; an output with the same kind and
/// destination as an earlier one replaces it); everything else (other arrays too) replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    merge_at(base, over, "");
}

fn merge_at(base: &mut toml::Table, over: toml::Table, path: &str) {
    for (k, v) in over {
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_at(b, o, &here),
            (Some(toml::Value::Array(b)), toml::Value::Array(o)) if here == "output.sink" => {
                for sink in o {
                    match b.iter().position(|s| sink_key(s) == sink_key(&sink)) {
                        Some(i) => b[i] = sink,
                        None => b.push(sink),
                    }
                }
            }
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// What makes two `[[output.sink]]` tables the same output: kind and destination.
fn sink_key(v: &toml::Value) -> (Option<&str>, Option<&str>) {
    let get = |k: &str| v.get(k).and_then(|x| x.as_str());
    let dest = get("path")
        .or_else(|| get("address"))
        .or_else(|| get("port"));
    (get("kind"), dest)
}
