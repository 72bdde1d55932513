//! Error kinds. Each variant's message names the file, key or device it is about and, where a
//! user can act, the fix. Whether retrying helps is said on each variant.

use std::path::PathBuf;

/// Everything that can stop sonotrack before or while it runs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened, read or written. Retrying helps only if the file system changes.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A configuration problem found before any audio was read. Never helped by retrying.
    #[error("{0}")]
    Config(#[from] ConfigError),

    /// The WAV file is not readable or does not match the configuration. Never helped by retrying.
    #[error("{path}: {problem}\n  fix: {fix}")]
    Wav {
        path: PathBuf,
        problem: String,
        fix: String,
    },

    /// A scene directory (audio*.wav + array.json + optional truth.csv) is incomplete or malformed.
    #[error("scene {path}: {problem}\n  fix: {fix}")]
    Scene {
        path: PathBuf,
        problem: String,
        fix: String,
    },

    /// A compute backend failed. The pipeline catches this, redoes the frame on the CPU and stays
    /// there; it only reaches the user when the CPU backend itself fails.
    #[error("{0}")]
    Backend(#[from] BackendError),

    /// An output could not be opened at start-up (at run time, sink errors are counted, not fatal).
    #[error("output `{name}`: {problem}\n  fix: {fix}")]
    Output {
        name: String,
        problem: String,
        fix: String,
    },

    /// A capture device could not be opened or failed while running.
    #[error("audio device `{device}`: {problem}\n  fix: {fix}")]
    Audio {
        device: String,
        problem: String,
        fix: String,
    },

    /// Invalid command-line usage that clap cannot express.
    #[error("{0}")]
    Usage(String),
}

/// A configuration error: which file and key, what is wrong, and how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: `{key}`: {problem}\n  fix: {fix}")]
pub struct ConfigError {
    /// The configuration file (or "built-in defaults", or a scene's array.json).
    pub file: String,
    /// The dotted key the problem is about, e.g. `gcc.band_hz`.
    pub key: String,
    pub problem: String,
    pub fix: String,
}

impl ConfigError {
    pub fn new(
        file: impl Into<String>,
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            file: file.into(),
            key: key.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// A failure inside a compute backend (CUDA driver, NVRTC, cuFFT, or a deliberate test fault).
/// Retrying on the same backend is not attempted: the pipeline falls back to the CPU.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{backend} backend: {what}")]
pub struct BackendError {
    pub backend: &'static str,
    pub what: String,
}

impl BackendError {
    pub fn new(backend: &'static str, what: impl Into<String>) -> Self {
        Self {
            backend,
            what: what.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach a path to an `std::io::Error`.
pub(crate) trait IoContext<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| Error::Io {
            path: path.into(),
            source,
        })
    }
}
