//! The kernel table: each `.cu` file in `kernels/` is one NVRTC program, embedded here with the
//! headers it includes and the entry points it defines. This is the one list of entry points:
//! a kernel is looked up through its program ([`super::Gpu::function`]), and a name the table
//! does not list is an error. A program is compiled the first time something needs it (the
//! correlator, the particle filter, the curves bank), so a process compiles only the kernels
//! its configuration uses.

/// One program: its name (for the logs and the cache), its source and its entry points.
#[derive(Debug)]
pub struct Program {
    pub name: &'static str,
    pub source: &'static str,
    pub entries: &'static [&'static str],
    /// Its place in [`PROGRAMS`] (the slot its loaded module is kept in).
    pub index: usize,
}

/// GCC-PHAT: windowing, the weighted cross-spectra and the peaks.
pub const GCC: Program = Program {
    name: "gcc",
    source: include_str!("../../../kernels/gcc.cu"),
    entries: &["gcc_window", "gcc_cross", "gcc_cross_few", "gcc_peaks"],
    index: 0,
};

/// The particle filter.
pub const PF: Program = Program {
    name: "pf",
    source: include_str!("../../../kernels/pf.cu"),
    entries: &[
        "pf_step",
        "pf_step_dir",
        "pf_step_small",
        "pf_sums",
        "pf_sums_small",
        "pf_slow_begin",
        "pf_temper_grid",
        "pf_scan_local",
        "pf_resample",
        "pf_resample_small",
        "pf_init",
        "pf_fetch",
        "pf_step_live",
        "pf_step_live_cluster",
    ],
    index: 1,
};

/// The curves bank of track-before-detect.
pub const TBD: Program = Program {
    name: "tbd",
    source: include_str!("../../../kernels/tbd.cu"),
    entries: &[
        "tbd_reset",
        "tbd_lobes",
        "tbd_weigh",
        "tbd_set_sums",
        "tbd_exist",
        "tbd_tile_sums",
        "tbd_scan_tiles",
        "tbd_cum",
        "tbd_resample",
    ],
    index: 2,
};

/// Every program, in index order.
pub const PROGRAMS: [&Program; 3] = [&GCC, &PF, &TBD];

/// The headers a program may include (`#include "name"`).
const HEADERS: &[(&str, &str)] = &[("common.cuh", include_str!("../../../kernels/common.cuh"))];

/// `p`'s source with each `#include "header"` line replaced by the header's text (once each;
/// the headers hold `#pragma once`). An unknown header is an error.
pub fn expanded(p: &Program) -> Result<String, String> {
    let mut out = String::with_capacity(p.source.len() + 32_768);
    let mut seen: Vec<&str> = Vec::new();
    for line in p.source.lines() {
        let Some(name) = include_of(line) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let Some((_, text)) = HEADERS.iter().find(|(h, _)| *h == name) else {
            return Err(format!(
                "kernels/{}.cu includes \"{name}\", which is not in the kernel table's headers",
                p.name
            ));
        };
        if !seen.contains(&name) {
            seen.push(name);
            out.push_str(text);
            out.push('\n');
        }
    }
    Ok(out)
}

/// The header a line includes (`#include "x"`), if it is such a line.
fn include_of(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("#include")?.trim();
    rest.strip_prefix('"')?.strip_suffix('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program expands, its index is its place in the list, and each entry point it lists
    /// is an `extern "C"` kernel of its source (and none it defines is left out).
    #[test]
    fn the_table_matches_the_sources() {
        for (i, p) in PROGRAMS.iter().enumerate() {
            assert_eq!(p.index, i, "{}", p.name);
            let src = expanded(p).unwrap();
            assert!(
                src.contains("__device__ __forceinline__ uint4 philox("),
                "{}",
                p.name
            );
            let mut defined: Vec<String> = Vec::new();
            let lines: Vec<&str> = src.lines().collect();
            for (k, l) in lines.iter().enumerate() {
                if !l.contains("extern \"C\"") {
                    continue;
                }
                let text = lines[k..(k + 3).min(lines.len())].join(" ");
                let prefix = format!("{}_", p.name);
                let at = text
                    .find(&prefix)
                    .expect("a kernel of the program's prefix");
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                defined.push(name);
            }
            defined.sort();
            let mut listed: Vec<String> = p.entries.iter().map(|s| s.to_string()).collect();
            listed.sort();
            assert_eq!(defined, listed, "{}", p.name);
        }
    }

    #[test]
    fn an_unknown_header_is_refused() {
        let p = Program {
            name: "x",
            source: "#include \"nowhere.cuh\"\n",
            entries: &[],
            index: 0,
        };
        assert!(expanded(&p).unwrap_err().contains("nowhere.cuh"));
        assert_eq!(include_of("  #include \"a.h\""), Some("a.h"));
        assert_eq!(include_of("// #include \"a.h\""), None);
    }
}
