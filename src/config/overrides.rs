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
        let text = toml::to_string(self)
            .map_err(|e| ConfigError::new(file, "(all)", e.to_string(), "report this as a bug"))?;
        let mut table: toml::Table = toml::from_str(&text)
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
        let text = toml::to_string(&table)
            .map_err(|e| ConfigError::new(file, "(all)", e.to_string(), "report this as a bug"))?;
        Config::parse_str(&text, file)
    }
}
