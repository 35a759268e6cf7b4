//! Known answers: the 1,615 BPPLIB instances in `tests/data/bpplib`
//! (or `$MICROBATCH_BPPLIB`; provenance in `tests/data/README.md`), with
//! proven optima and the reference FFD and BFD bin counts, which do not depend
//! on how ties are broken.

use std::path::PathBuf;

use microbatch::pack::{best_fit_decreasing, first_fit_decreasing, lower_bounds, next_fit};

fn data_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("MICROBATCH_BPPLIB") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/bpplib"),
    };
    dir.join("optima.tsv").is_file().then_some(dir)
}

struct Row {
    class: String,
    name: String,
    n: usize,
    c: u64,
    sum: u64,
    l1: u64,
    l2: u64,
    opt: usize,
    ffd: usize,
    bfd: usize,
}

fn parse_rows(text: &str) -> Vec<Row> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split('\t').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let (cls, nm, n, c, sum, l1, l2, opt, ffd, bfd) = (
        col("cls"),
        col("name"),
        col("n"),
        col("c"),
        col("sum"),
        col("L1"),
        col("L2"),
        col("opt"),
        col("FFD"),
        col("BFD"),
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let num = |i: usize| -> u64 {
                f[i].trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("bad number in {line}"))
            };
            Row {
                class: f[cls].to_string(),
                name: f[nm].to_string(),
                n: num(n) as usize,
                c: num(c),
                sum: num(sum),
                l1: num(l1),
                l2: num(l2),
                opt: num(opt) as usize,
                ffd: num(ffd) as usize,
                bfd: num(bfd) as usize,
            }
        })
        .collect()
}

/// Reads an instance: n, c, then n weights (whitespace separated, CRLF ok).
fn read_instance(path: &std::path::Path) -> (u64, Vec<u64>) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut nums = text
        .split_whitespace()
        .map(|t| t.parse::<u64>().expect("integer"));
    let n = nums.next().expect("n") as usize;
    let c = nums.next().expect("c");
    let weights: Vec<u64> = nums.collect();
    assert_eq!(weights.len(), n, "{}: expected {n} weights", path.display());
    (c, weights)
}

#[test]
fn bpplib_reference_ffd_and_bfd_counts() {
    let Some(dir) = data_dir() else {
        let msg = "BPPLIB data not found at tests/data/bpplib or $MICROBATCH_BPPLIB; \
                   the known-answer test did not run";
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("{msg} (CI=true requires it)");
        }
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let rows = parse_rows(&std::fs::read_to_string(dir.join("optima.tsv")).expect("optima.tsv"));
    assert_eq!(rows.len(), 1615, "expected 1,615 instances");
    let (mut ffd_opt, mut bfd_opt) = (0usize, 0usize);
    for row in &rows {
        let path = dir.join(&row.class).join(format!("{}.txt", row.name));
        let (c, weights) = read_instance(&path);
        assert_eq!((c, weights.len()), (row.c, row.n), "{}", row.name);
        assert_eq!(weights.iter().sum::<u64>(), row.sum, "{}", row.name);

        let ffd = first_fit_decreasing(&weights, c).unwrap();
        let bfd = best_fit_decreasing(&weights, c).unwrap();
        assert_eq!(ffd.len(), row.ffd, "{}: FFD", row.name);
        assert_eq!(bfd.len(), row.bfd, "{}: BFD", row.name);
        assert!(
            ffd.len() >= row.opt && bfd.len() >= row.opt,
            "{}: beats the optimum",
            row.name
        );
        assert!(
            next_fit(&weights, c).unwrap().len() >= row.opt,
            "{}: NF beats the optimum",
            row.name
        );

        let lb = lower_bounds(&weights, c).unwrap();
        assert_eq!((lb.l1, lb.l2), (row.l1, row.l2), "{}: bounds", row.name);
        assert_eq!(ffd.lower_bounds(), lb, "{}", row.name);
        assert!(lb.l2 as usize <= row.opt);

        // The same instance as u32, and through the comparison-sort path
        // (capacity scaled far above the counting-sort limit).
        let small: Vec<u32> = weights.iter().map(|&w| w as u32).collect();
        assert_eq!(
            first_fit_decreasing(&small, c as u32).unwrap().len(),
            row.ffd
        );
        let scaled: Vec<u64> = weights.iter().map(|&w| w << 30).collect();
        assert_eq!(
            first_fit_decreasing(&scaled, c << 30).unwrap().len(),
            row.ffd,
            "{}",
            row.name
        );
        assert_eq!(
            best_fit_decreasing(&scaled, c << 30).unwrap().len(),
            row.bfd,
            "{}",
            row.name
        );

        ffd_opt += usize::from(ffd.len() == row.opt);
        bfd_opt += usize::from(bfd.len() == row.opt);
    }
    eprintln!(
        "BPPLIB: FFD optimal on {ffd_opt} of {}, BFD on {bfd_opt}",
        rows.len()
    );
}
