//! `--set key=value` overrides.

use super::Config;
use crate::error::ConfigError;

impl Config {
    /// Apply `key=value` overrides (dotted keys, TOML values; bare words are strings), e.g.
    /// `gcc.frame_samples=8192` or `tracker.backend=cpu`, and validate the result.
    pub fn with_overrides(&self, sets: &[String]) -> Result<Self, ConfigError> {
        if sets.is_empty() {
            return Ok(self.clone());
        }
        let file = "--set";
        let mut table = toml::Table::try_from(self)
            .map_err(|e| ConfigError::new(file, "(all)", e.to_string(), "report this as a bug"))?;
        for set in sets {
            let Some((key, value)) = set.split_once('=') else {
                return Err(ConfigError::new(
                    file,
                    set,
                    "not of the form key=value",
                    "write e.g. --set gcc.frame_samples=8192",
                ));
            };
            let key = key.trim();
            let value: toml::Value =
                toml::from_str::<toml::Table>(&format!("v = {}", value.trim()))
                    .ok()
                    .and_then(|mut t| t.remove("v"))
                    .unwrap_or_else(|| toml::Value::String(value.trim().to_string()));
            let parts: Vec<&str> = key.split('.').collect();
            let mut cur = &mut table;
            for part in &parts[..parts.len() - 1] {
                let entry = cur
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = match entry {
                    toml::Value::Table(t) => t,
                    _ => {
                        return Err(ConfigError::new(
                            file,
                            key,
                            format!("`{part}` is not a table"),
                            "set a key inside a table, e.g. gcc.frame_samples",
                        ));
                    }
                };
            }
            cur.insert(parts[parts.len() - 1].to_string(), value);
        }
        // An error names the --set argument that wrote the key, never a line of the merged
        // text.
        let which = |key: &str| {
            sets.iter()
                .rev()
                .find(|s| {
                    let k = s.split('=').next().unwrap_or("").trim();
                    let bare = key.split('[').next().unwrap_or(key);
                    key.starts_with(k) || k.starts_with(bare)
                })
                .map_or_else(|| file.to_string(), |s| format!("--set {s}"))
        };
        let mut cfg: Config = super::errors::parse_table(table, file, &|_| Vec::new()).map_err(
            |mut e: ConfigError| {
                e.file = which(&e.key);
                e
            },
        )?;
        cfg.settle_mode(file);
        cfg.validate(file).map_err(|mut e| {
            e.file = which(&e.key);
            e
        })?;
        Ok(cfg)
    }
}
