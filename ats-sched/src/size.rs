//! Byte sizes as users write them: `2G` (2,000 MB, as the papers count),
//! `2GB`, `2GiB`, `1500M`, `1500MiB`, `4096` (bytes).

/// Parses a positive size in bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "{s:?} is not a size (examples: 2G, 1500M, 2GiB, 4096)"
        ));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 2G, 1500M, 2GiB, 4096)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0f64.powi(4),
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?} (use K, M, G, T, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    let bytes = value * mult;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err(format!("{s:?}: a size must be at least 1 byte"));
    }
    if bytes > u64::MAX as f64 / 2.0 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(bytes.round() as u64)
}

/// Formats bytes for people: `1.53 GB`, `512.0 MB`.
pub fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{b} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1500M"), Ok(1_500_000_000));
        assert_eq!(parse_size("1500MiB"), Ok(1500 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1.5g"), Ok(1_500_000_000));
        assert_eq!(parse_size("1K"), Ok(1000));
        for bad in [
            "0",
            "-1G",
            "",
            "G",
            "2X",
            "abc",
            "0.0001",
            "1e400",
            "99999999999999999999T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
