//! Streaming WAV replay (hound): reads a buffer at a time, so an hour-long recording replays in
//! constant memory. 8/16/24/32-bit integer and 32-bit float files are accepted.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::audio::{AudioSource, ReadResult};
use crate::error::{Error, Result};

enum Samples {
    Int {
        reader: hound::WavReader<BufReader<File>>,
        scale: f32,
    },
    Float(hound::WavReader<BufReader<File>>),
}

pub struct WavSource {
    path: PathBuf,
    spec: hound::WavSpec,
    total: u64,
    read_so_far: u64,
    samples: Samples,
    /// Frames to skip before the first read (`--from`).
    skip: u64,
    /// Stop after this many frames (`--to`).
    limit: Option<u64>,
    truncated: Option<String>,
}

impl WavSource {
    pub fn open(path: &Path) -> Result<Self> {
        let reader = hound::WavReader::open(path).map_err(|e| wav_error(path, &e))?;
        let spec = reader.spec();
        if spec.channels == 0 {
            return Err(Error::Wav {
                path: path.into(),
                problem: "the header declares 0 channels".into(),
                fix: "the file is damaged; re-export it".into(),
            });
        }
        if spec.sample_rate == 0 {
            return Err(Error::Wav {
                path: path.into(),
                problem: "the header declares a sample rate of 0 Hz".into(),
                fix: "the file is damaged; re-export it".into(),
            });
        }
        let total = u64::from(reader.duration());
        if total == 0 {
            return Err(Error::Wav {
                path: path.into(),
                problem: "the data chunk holds no samples (a header only)".into(),
                fix: "record or export the audio again; nothing here can be tracked".into(),
            });
        }
        let samples = match spec.sample_format {
            hound::SampleFormat::Float => {
                if spec.bits_per_sample != 32 {
                    return Err(Error::Wav {
                        path: path.into(),
                        problem: format!("{}-bit float samples are not supported", spec.bits_per_sample),
                        fix: "convert to 32-bit float or 16/24/32-bit integer PCM (e.g. sox in.wav -b 32 -e float out.wav)".into(),
                    });
                }
                Samples::Float(reader)
            }
            hound::SampleFormat::Int => {
                if !(spec.bits_per_sample >= 8 && spec.bits_per_sample <= 32) {
                    return Err(Error::Wav {
                        path: path.into(),
                        problem: format!(
                            "{}-bit integer samples are not supported",
                            spec.bits_per_sample
                        ),
                        fix: "convert to 16, 24 or 32-bit PCM".into(),
                    });
                }
                Samples::Int {
                    reader,
                    scale: 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32,
                }
            }
        };
        Ok(Self {
            path: path.into(),
            spec,
            total,
            read_so_far: 0,
            samples,
            skip: 0,
            limit: None,
            truncated: None,
        })
    }

    /// Replay only `[from_s, to_s)` of the file.
    pub fn set_range(&mut self, from_s: Option<f64>, to_s: Option<f64>) -> Result<()> {
        let fs = f64::from(self.spec.sample_rate);
        let from = from_s
            .map(|s| (s.max(0.0) * fs).round() as u64)
            .unwrap_or(0);
        let to = to_s
            .map(|s| (s.max(0.0) * fs).round() as u64)
            .unwrap_or(self.total);
        if from >= self.total || to <= from {
            return Err(Error::Usage(format!(
                "{}: the range {:.3}..{:.3} s holds no audio (the file is {:.3} s long)",
                self.path.display(),
                from as f64 / fs,
                to as f64 / fs,
                self.total as f64 / fs
            )));
        }
        let seek = |r: &mut hound::WavReader<BufReader<File>>| r.seek(from as u32);
        let res = match &mut self.samples {
            Samples::Int { reader, .. } => seek(reader),
            Samples::Float(reader) => seek(reader),
        };
        res.map_err(|e| Error::Io {
            path: self.path.clone(),
            source: e,
        })?;
        self.skip = from;
        self.limit = Some(to - from);
        Ok(())
    }

    /// The first sample frame this source delivers (after `set_range`).
    pub fn first_frame(&self) -> u64 {
        self.skip
    }

    pub fn spec(&self) -> hound::WavSpec {
        self.spec
    }
}

fn wav_error(path: &Path, e: &hound::Error) -> Error {
    let (problem, fix) = match e {
        hound::Error::IoError(io) if io.kind() == std::io::ErrorKind::NotFound => {
            (format!("no such file ({io})"), "check the path")
        }
        // hound reports a short header as an I/O error of kind Other with this text.
        hound::Error::IoError(io)
            if io.kind() == std::io::ErrorKind::UnexpectedEof
                || io.to_string().contains("enough bytes") =>
        {
            (
                "the file ends inside its header (truncated or damaged)".into(),
                "copy or export the recording again",
            )
        }
        hound::Error::IoError(io) if io.kind() == std::io::ErrorKind::PermissionDenied => (
            format!("cannot be opened ({io})"),
            "check the file's permissions",
        ),
        hound::Error::IoError(io) => (format!("cannot read: {io}"), "check the path and the disk"),
        hound::Error::FormatError(m) => (
            format!("not a valid WAV file ({m})"),
            "give a RIFF/WAVE file; convert other formats with e.g. sox or ffmpeg",
        ),
        hound::Error::Unsupported => (
            "uses a WAV encoding this reader does not support (compressed or unusual format)"
                .into(),
            "convert to PCM (16/24/32-bit) or 32-bit float, e.g. sox in.wav -b 16 out.wav",
        ),
        hound::Error::UnfinishedSample => (
            "the data ends inside a sample".into(),
            "the file is truncated; re-export it",
        ),
        other => (other.to_string(), "re-export the file as plain PCM WAV"),
    };
    Error::Wav {
        path: path.into(),
        problem,
        fix: fix.into(),
    }
}

impl AudioSource for WavSource {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn sample_rate_hz(&self) -> u32 {
        self.spec.sample_rate
    }

    fn channels(&self) -> usize {
        usize::from(self.spec.channels)
    }

    fn total_frames(&self) -> Option<u64> {
        Some(self.limit.unwrap_or(self.total))
    }

    fn read(&mut self, out: &mut [f32]) -> Result<ReadResult> {
        let ch = self.channels();
        let mut want = out.len() / ch;
        if let Some(limit) = self.limit {
            want = want.min((limit - self.read_so_far.min(limit)) as usize);
        }
        if want == 0 || self.truncated.is_some() {
            return Ok(ReadResult::End);
        }
        let n = want * ch;
        let mut got = 0usize;
        let mut failure: Option<hound::Error> = None;
        match &mut self.samples {
            Samples::Int { reader, scale } => {
                for s in reader.samples::<i32>().take(n) {
                    match s {
                        Ok(v) => {
                            out[got] = v as f32 * *scale;
                            got += 1;
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
            Samples::Float(reader) => {
                for s in reader.samples::<f32>().take(n) {
                    match s {
                        Ok(v) => {
                            out[got] = v;
                            got += 1;
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        let frames = got / ch;
        self.read_so_far += frames as u64;
        if let Some(e) = failure {
            // A recording cut short (power loss, full disk) still holds useful audio: replay what
            // is there and say so in the summary, rather than refuse the whole file.
            let fs = f64::from(self.spec.sample_rate);
            let msg = format!(
                "{}: data ends at {:.3} s although the header promises {:.3} s ({e}); replayed what is there",
                self.path.display(),
                (self.skip + self.read_so_far) as f64 / fs,
                self.total as f64 / fs
            );
            log::warn!("{msg}");
            self.truncated = Some(msg);
            if frames == 0 {
                return Ok(ReadResult::End);
            }
        } else if got == 0 {
            return Ok(ReadResult::End);
        }
        Ok(ReadResult::Samples(frames))
    }

    fn warnings(&self) -> Vec<String> {
        self.truncated.iter().cloned().collect()
    }
}

/// A WAV file being written block by block: 32-bit float, or 16-bit PCM (clipped).
pub struct WavWriter {
    path: std::path::PathBuf,
    inner: hound::WavWriter<std::io::BufWriter<std::fs::File>>,
    s16: bool,
}

impl WavWriter {
    /// Create `path` for `channels` interleaved channels at `sample_rate_hz`.
    pub fn create(path: &Path, channels: usize, sample_rate_hz: u32, s16: bool) -> Result<Self> {
        let spec = hound::WavSpec {
            channels: channels as u16,
            sample_rate: sample_rate_hz,
            bits_per_sample: if s16 { 16 } else { 32 },
            sample_format: if s16 {
                hound::SampleFormat::Int
            } else {
                hound::SampleFormat::Float
            },
        };
        let inner = hound::WavWriter::create(path, spec).map_err(|e| write_error(path, e))?;
        Ok(Self {
            path: path.into(),
            inner,
            s16,
        })
    }

    /// Append interleaved samples.
    pub fn write(&mut self, interleaved: &[f32]) -> Result<()> {
        for &v in interleaved {
            let done = if self.s16 {
                self.inner
                    .write_sample((v * 32767.0).round().clamp(-32768.0, 32767.0) as i16)
            } else {
                self.inner.write_sample(v)
            };
            done.map_err(|e| write_error(&self.path, e))?;
        }
        Ok(())
    }

    /// Write the header's sizes and close the file.
    pub fn finish(self) -> Result<()> {
        let path = self.path;
        self.inner.finalize().map_err(|e| write_error(&path, e))
    }
}

fn write_error(path: &Path, e: hound::Error) -> Error {
    Error::Io {
        path: path.into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Write interleaved f32 samples as a WAV file: 32-bit float, or 16-bit PCM (clipped) when `s16`.
pub fn write_wav(
    path: &Path,
    channels: usize,
    sample_rate_hz: u32,
    interleaved: &[f32],
    s16: bool,
) -> Result<()> {
    let mut w = WavWriter::create(path, channels, sample_rate_hz, s16)?;
    w.write(interleaved)?;
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file name in the temporary directory for one test; the file is removed when the
    /// test is done with it.
    fn tmp(name: &str) -> TmpFile {
        TmpFile(std::env::temp_dir().join(format!("sonotrack-wav-{}-{name}", std::process::id())))
    }

    struct TmpFile(PathBuf);

    impl std::ops::Deref for TmpFile {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for TmpFile {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TmpFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn round_trip_int_and_float() {
        let data: Vec<f32> = (0..3000).map(|i| ((i as f32) * 0.01).sin() * 0.5).collect();
        for s16 in [true, false] {
            let p = tmp(if s16 { "a16.wav" } else { "af.wav" });
            write_wav(&p, 3, 8000, &data, s16).unwrap();
            let mut src = WavSource::open(&p).unwrap();
            assert_eq!(src.channels(), 3);
            assert_eq!(src.total_frames(), Some(1000));
            let mut buf = vec![0.0; 3 * 256];
            let mut all = Vec::new();
            loop {
                match src.read(&mut buf).unwrap() {
                    ReadResult::Samples(n) => all.extend_from_slice(&buf[..n * 3]),
                    ReadResult::End => break,
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(all.len(), data.len());
            let tol = if s16 { 1.0 / 32767.0 } else { 0.0 };
            for (a, b) in all.iter().zip(&data) {
                assert!((a - b).abs() <= tol);
            }
        }
    }

    #[test]
    fn range_selects_part_of_the_file() {
        let data: Vec<f32> = (0..2000).map(|i| i as f32 / 4000.0).collect();
        let p = tmp("range.wav");
        write_wav(&p, 2, 1000, &data, false).unwrap();
        let mut src = WavSource::open(&p).unwrap();
        src.set_range(Some(0.2), Some(0.5)).unwrap();
        assert_eq!(src.total_frames(), Some(300));
        let mut buf = vec![0.0; 2 * 1000];
        assert_eq!(src.read(&mut buf).unwrap(), ReadResult::Samples(300));
        assert_eq!(buf[0], data[400]);
        assert_eq!(src.read(&mut buf).unwrap(), ReadResult::End);
        assert!(src.set_range(Some(5.0), None).is_err());
    }

    #[test]
    fn garbage_and_missing_files_name_the_file() {
        let p = tmp("garbage.wav");
        std::fs::write(&p, b"this is not a wav file at all, just text").unwrap();
        let e = WavSource::open(&p).err().unwrap().to_string();
        assert!(
            e.contains("garbage.wav") && e.contains("not a valid WAV"),
            "{e}"
        );
        let e = WavSource::open(&tmp("nope.wav")).err().unwrap().to_string();
        assert!(e.contains("nope.wav") && e.contains("no such file"), "{e}");
    }

    #[test]
    fn truncated_file_replays_what_is_there_and_warns() {
        let data: Vec<f32> = vec![0.25; 2 * 1000];
        let p = tmp("trunc.wav");
        write_wav(&p, 2, 1000, &data, true).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1001]).unwrap();
        let mut src = WavSource::open(&p).unwrap();
        let mut buf = vec![0.0; 2 * 4000];
        let mut frames = 0;
        loop {
            match src.read(&mut buf).unwrap() {
                ReadResult::Samples(n) => frames += n,
                ReadResult::End => break,
                other => panic!("{other:?}"),
            }
        }
        assert!(frames > 700 && frames < 1000, "{frames}");
        assert_eq!(src.warnings().len(), 1, "{:?}", src.warnings());
    }
}
