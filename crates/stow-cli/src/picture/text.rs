//! Small text helpers the pictures share: byte units, axis ticks, escaping.

/// Bytes in binary units with two decimals: `512 B`, `1.50 KiB`, `6.89 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

/// The binary unit an axis that reaches `max_bytes` is labelled in.
pub fn axis_unit(max_bytes: f64) -> (&'static str, f64) {
    const KIB: f64 = 1024.0;
    if max_bytes >= KIB * KIB * KIB {
        ("GiB", KIB * KIB * KIB)
    } else if max_bytes >= KIB * KIB {
        ("MiB", KIB * KIB)
    } else if max_bytes >= KIB {
        ("KiB", KIB)
    } else {
        ("B", 1.0)
    }
}

/// A step of 1, 2 or 5 times a power of ten that cuts `span` into about
/// `target` pieces (at least 1e-9 so callers can loop on it).
pub fn nice_step(span: f64, target: usize) -> f64 {
    let raw = (span / target.max(1) as f64).max(1e-9);
    let power = 10f64.powf(raw.log10().floor());
    let frac = raw / power;
    let nice = if frac <= 1.0 {
        1.0
    } else if frac <= 2.0 {
        2.0
    } else if frac <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// A tick value in `unit`, without trailing zeros (`0.5`, `2`, `12.25`).
pub fn tick_label(value: f64) -> String {
    let s = format!("{value:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Text made safe for XML character data and attribute values. Characters
/// XML 1.0 cannot hold at all (most control characters) become U+FFFD:
/// tensor names come from the model and may contain anything.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_picks_the_unit() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(7_225_344), "6.89 MiB");
        assert_eq!(human_bytes(u64::MAX), "16777216.00 TiB");
    }

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(129.0, 8), 20.0);
        assert_eq!(nice_step(0.0, 5), 1e-9);
        assert_eq!(tick_label(2.50), "2.5");
        assert_eq!(tick_label(3.0), "3");
    }

    #[test]
    fn escaping_keeps_xml_well_formed() {
        assert_eq!(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(xml_escape("x\u{1}y"), "x\u{FFFD}y");
    }
}
