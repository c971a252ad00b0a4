//! A text chart of the arena for terminals and bug reports: one row per
//! step, the arena scaled across a fixed number of columns, one letter per
//! buffer. No line is wider than [`MAX_WIDTH`] characters.

use super::layout::Layout;
use super::text::human_bytes;
use std::fmt::Write as _;

/// Widest line the chart prints, in characters.
pub const MAX_WIDTH: usize = 100;
const OP_WIDTH: usize = 10;
const LIVE_WIDTH: usize = 11;
const PEAK_MARK: &str = " <-peak";
const SYMBOLS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Renders the panels of a bundle ([`Layout::panels`]): one chart per
/// memory pool, fastest first, each scaled to its own pool and headed by
/// its summary line (name, size, fill at its peak); one layout is drawn as
/// [`render`] draws it.
pub fn render_panels(panels: &[Layout<'_>]) -> String {
    match panels {
        [one] => render(one),
        _ => panels
            .iter()
            .map(|l| render(l))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// Renders `l` as text, every line at most [`MAX_WIDTH`] characters.
pub fn render(l: &Layout<'_>) -> String {
    let mut out = String::new();
    let arena = l.arena_bytes();
    say(&mut out, &l.summary());
    if arena == 0 || l.blocks.is_empty() {
        say(&mut out, "the arena is empty");
        return out;
    }
    let step_width = digits(l.steps.saturating_sub(1)).max(4);
    let prefix = step_width + 1 + OP_WIDTH + 1;
    let cols = MAX_WIDTH
        .saturating_sub(prefix + 2 + LIVE_WIDTH + PEAK_MARK.len())
        .max(8);
    say(
        &mut out,
        &format!(
            "one row per step, one column per {}; a letter per buffer (aliases keep their",
            human_bytes(arena.div_ceil(cols as u64))
        ),
    );
    say(
        &mut out,
        if l.pool.is_some() {
            "source's letter), '.' free; L on the ruler marks the pool's peak"
        } else {
            "source's letter), '.' free; L on the ruler marks the lower bound"
        },
    );
    let right = human_bytes(arena);
    let gap = (cols + 2).saturating_sub(1 + right.len());
    say(&mut out, &format!("{:prefix$}0{:gap$}{right}", "", ""));
    let mut ruler = vec![b'-'; cols];
    let bound = l.lower_bound_bytes();
    if bound < arena {
        let at = column_of(bound, arena, cols).min(cols - 1);
        ruler[at] = b'L';
    }
    say(
        &mut out,
        &format!("{:prefix$}+{}+", "", String::from_utf8_lossy(&ruler)),
    );

    let symbol = symbols(l);
    let mut best: Vec<(u64, Option<usize>)> = vec![(0, None); cols];
    for step in 0..l.steps {
        best.iter_mut().for_each(|c| *c = (0, None));
        for (b, blk) in l.blocks.iter().enumerate() {
            if !blk.live_at(step) {
                continue;
            }
            let (lo, hi) = (blk.offset().min(arena), blk.end().min(arena));
            let (c1, c2) = (
                column_of(lo, arena, cols),
                column_of(hi, arena, cols).min(cols - 1),
            );
            for (c, cell) in best.iter_mut().enumerate().take(c2 + 1).skip(c1) {
                let (clo, chi) = cell_bytes(c, arena, cols);
                let covered = hi.min(chi).saturating_sub(lo.max(clo));
                if covered > cell.0 {
                    *cell = (covered, Some(b));
                }
            }
        }
        let bar: String = best
            .iter()
            .map(|&(_, b)| b.map_or('.', |b| symbol[l.root(b)]))
            .collect();
        let op: String = l
            .op_at(step)
            .map_or("-", |o| o.op_type.as_str())
            .chars()
            .map(printable)
            .take(OP_WIDTH)
            .collect();
        let live = human_bytes(l.live.get(step as usize).copied().unwrap_or(0));
        let mark = if step == l.peak_step { PEAK_MARK } else { "" };
        say(
            &mut out,
            &format!("{step:>step_width$} {op:<OP_WIDTH$} |{bar}|{live:>LIVE_WIDTH$}{mark}"),
        );
    }
    say(&mut out, &l.peak_text());
    out
}

/// One symbol per block, the same for every block of one buffer, assigned
/// in the order buffers are first written so neighbours differ.
fn symbols(l: &Layout<'_>) -> Vec<char> {
    let mut roots: Vec<usize> = (0..l.blocks.len()).filter(|&b| l.root(b) == b).collect();
    roots.sort_by_key(|&b| (l.blocks[b].first, l.blocks[b].offset()));
    let mut symbol = vec!['?'; l.blocks.len()];
    for (n, &b) in roots.iter().enumerate() {
        symbol[b] = char::from(SYMBOLS[n % SYMBOLS.len()]);
    }
    symbol
}

/// The column holding byte `at`.
fn column_of(at: u64, arena: u64, cols: usize) -> usize {
    let c = u128::from(at) * cols as u128 / u128::from(arena.max(1));
    usize::try_from(c).unwrap_or(usize::MAX)
}

/// Bytes `[lo, hi)` of column `c`.
fn cell_bytes(c: usize, arena: u64, cols: usize) -> (u64, u64) {
    let edge = |c: usize| {
        let b = c as u128 * u128::from(arena) / cols.max(1) as u128;
        u64::try_from(b).unwrap_or(u64::MAX)
    };
    (edge(c), edge(c + 1))
}

fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Model names reach the terminal: control characters could move the
/// cursor or recolour it, so they are shown as `?`.
fn printable(c: char) -> char {
    if c.is_control() {
        '?'
    } else {
        c
    }
}

/// Appends `line`, cut to [`MAX_WIDTH`] characters.
fn say(out: &mut String, line: &str) {
    let line: String = line.chars().map(printable).take(MAX_WIDTH).collect();
    let _ = writeln!(out, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::picture::layout::tests::sample;

    #[test]
    fn rows_are_steps_and_fit_the_width() {
        let mut c = sample();
        c.provenance.strategy = "a-very-long-strategy-name-".repeat(8);
        c.ops[0].op_type = "\u{1b}[31mEvilOpTypeName".into();
        let l = Layout::new(&c);
        let text = render(&l);
        for line in text.lines() {
            assert!(line.chars().count() <= MAX_WIDTH, "too wide: {line:?}");
            assert!(!line.contains('\u{1b}'));
        }
        let rows: Vec<&str> = text.lines().filter(|l| l.contains('|')).collect();
        assert_eq!(rows.len(), 2, "{text}");
        // Step 0: x (a) in the low half, h (b) in the high half; step 1: the
        // view y keeps x's letter.
        let bar = |row: &str| row.split('|').nth(1).unwrap().to_string();
        let b0 = bar(rows[0]);
        // h ends at byte 124 of 128: the last columns are free.
        assert!(
            b0.starts_with('a') && b0.trim_end_matches('.').ends_with('b'),
            "{b0}"
        );
        assert!(b0.ends_with('.'), "{b0}");
        assert!(bar(rows[1]).starts_with('a'));
        assert!(rows[0].ends_with(PEAK_MARK));
    }

    #[test]
    fn an_empty_arena_says_so() {
        let mut c = sample();
        c.arena_bytes = 0;
        assert!(render(&Layout::new(&c)).contains("the arena is empty"));
    }
}
