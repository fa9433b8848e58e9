//! RFC 8785 (JSON Canonicalization Scheme) serialisation and strict JSON parsing.
//!
//! Everything this crate hashes or signs as JSON goes through [`to_canonical`], so two parties
//! that agree on a value agree on its bytes. [`parse_strict`] is the only way JSON we verify is
//! read: it rejects duplicate object keys anywhere, which `serde_json` would silently resolve
//! (last key wins) and which would let a signed document mean two things.

use std::fmt::{self, Write};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A value that cannot be written as RFC 8785 JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// RFC 8785 numbers are IEEE 754 doubles; NaN and infinities have no JSON form.
    #[error("number {0} has no canonical JSON form (not a finite IEEE 754 double)")]
    NonFiniteNumber(String),
    /// Integers beyond 2^53 would change value when read as doubles by another implementation.
    #[error("integer {0} is outside the range a JSON double holds exactly (|n| <= 2^53)")]
    UnsafeInteger(String),
    /// The value has no JSON form at all (for example a map with non-string keys).
    #[error("value has no JSON form: {0}")]
    NotJson(String),
}

/// Serialise `value` as RFC 8785 canonical JSON bytes.
pub fn to_canonical(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Ok(out.into_bytes())
}

/// Serialise any `Serialize` value canonically (via `serde_json::Value`).
pub fn to_canonical_from<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let v = serde_json::to_value(value).map_err(|e| CanonicalError::NotJson(e.to_string()))?;
    to_canonical(&v)
}

fn write_value(out: &mut String, value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            // RFC 8785 3.2.3: members sorted by their names as arrays of UTF-16 code units.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

const MAX_SAFE_INTEGER: u64 = 1 << 53;

fn write_number(out: &mut String, n: &Number) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(CanonicalError::UnsafeInteger(u.to_string()));
        }
        let _ = write!(out, "{u}");
        return Ok(());
    }
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonicalError::UnsafeInteger(i.to_string()));
        }
        let _ = write!(out, "{i}");
        return Ok(());
    }
    let f = n
        .as_f64()
        .ok_or_else(|| CanonicalError::NonFiniteNumber(n.to_string()))?;
    write_double(out, f)
}

/// ECMAScript `Number.prototype.toString` for a finite double (RFC 8785 3.2.2.3).
fn write_double(out: &mut String, f: f64) -> Result<(), CanonicalError> {
    if !f.is_finite() {
        return Err(CanonicalError::NonFiniteNumber(f.to_string()));
    }
    if f == 0.0 {
        out.push('0');
        return Ok(());
    }
    if f < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` prints the shortest digits that round-trip, as ECMAScript requires.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let e: i32 = exp.parse().unwrap_or(0);
    let digits = ties_to_even(f.abs(), mantissa.chars().filter(|c| *c != '.').collect(), e);
    let k = digits.len() as i32;
    let n = e + 1; // position of the decimal point relative to the digit string
    if k <= n && n <= 21 {
        out.push_str(&digits);
        push_zeros(out, (n - k) as usize);
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        push_zeros(out, (-n) as usize);
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).abs());
    }
    Ok(())
}

/// ECMAScript (Number::toString, step 5) picks, among equally close shortest digit strings, the
/// one with an even last digit; Rust's shortest formatting rounds such a tie up. A tie happens
/// when the double's exact decimal expansion has exactly one more significant digit than the
/// shortest form and that digit is 5 (e.g. 1424953923781206.25, RFC 8785 Appendix B). Then the
/// other candidate differs by one in the last digit; use it if it is even and round-trips.
fn ties_to_even(f: f64, digits: String, e: i32) -> String {
    let k = digits.len();
    match digits.bytes().last() {
        Some(d) if (d - b'0') % 2 == 1 => {}
        _ => return digits,
    }
    // Precision 800 covers the longest exact expansion of a double (767 significant digits).
    let exact = format!("{f:.800e}");
    let Some((mantissa, exact_exp)) = exact.split_once('e') else {
        return digits;
    };
    if exact_exp.parse::<i32>().ok() != Some(e) {
        return digits;
    }
    let all: String = mantissa.chars().filter(|c| *c != '.').collect();
    let significant = all.trim_end_matches('0');
    if significant.len() != k + 1 || !significant.ends_with('5') {
        return digits;
    }
    let down = &significant[..k];
    let other = if digits == down {
        // Rust rounded down to an odd digit; the tie partner is one up (no carry: odd < 9 or
        // a carry would have produced a shorter form Rust would have found).
        let mut bytes = down.as_bytes().to_vec();
        match bytes.last_mut() {
            Some(d) if *d < b'9' => *d += 1,
            _ => return digits,
        }
        String::from_utf8(bytes).unwrap_or_default()
    } else {
        down.to_owned()
    };
    let (first, rest) = other.split_at(1.min(other.len()));
    match format!("{first}.{rest}e{e}").parse::<f64>() {
        Ok(back) if back == f => other,
        _ => digits,
    }
}

fn push_zeros(out: &mut String, count: usize) {
    out.extend(std::iter::repeat_n('0', count));
}

/// The bytes RFC 8785 escapes in a string: control characters, quote and backslash. A table
/// rather than three comparisons per byte: the fuzz build traces every integer comparison in
/// our code, and with them the scan was 18 % of a `merge_set` execution (8 % with the table).
const ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Most strings (digests, base64 payloads, names) need no escape: they are copied a run at a
    // time rather than a char at a time. Every byte that needs one is ASCII, so the cuts fall on
    // char boundaries.
    let mut rest = s;
    while let Some(at) = rest.bytes().position(|b| ESCAPED[usize::from(b)]) {
        out.push_str(&rest[..at]);
        match rest.as_bytes()[at] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{:04x}", c);
            }
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// Parse JSON, refusing duplicate object keys at any depth.
///
/// The error message carries serde_json's line and column.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue::deserialize_from(&mut de)?;
    de.end()?;
    Ok(value)
}

struct StrictValue;

impl StrictValue {
    fn deserialize_from<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

struct Strict(Value);

impl<'de> de::Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(json: &str) -> String {
        String::from_utf8(to_canonical(&serde_json::from_str(json).unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn rfc8785_sorts_members_by_utf16_code_units() {
        // RFC 8785 section 3.2.3 example: keys sorted as UTF-16, not as UTF-8 or by code point.
        let input = r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#;
        let out = canon(input);
        let keys: Vec<&str> = vec![
            "\r",
            "1",
            "\u{80}",
            "\u{f6}",
            "\u{20ac}",
            "\u{1f600}",
            "\u{fb33}",
        ];
        let mut pos = 0;
        for k in keys {
            let needle = serde_json::to_string(k).unwrap();
            let needle = if k == "\r" {
                "\"\\r\"".to_string()
            } else {
                needle
            };
            let at = out[pos..].find(&needle).expect("key present in order") + pos;
            pos = at + 1;
        }
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]}"#;
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(canon(input), expected);
    }

    #[test]
    fn es6_number_formatting() {
        for (input, expected) in [
            ("0.0", "0"),
            ("-0.0", "0"),
            ("1.0", "1"),
            ("-1.5", "-1.5"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345680000", "123456789012345680000"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("9007199254740992", "9007199254740992"),
        ] {
            let v: Value = serde_json::from_str(input).unwrap();
            assert_eq!(
                String::from_utf8(to_canonical(&v).unwrap()).unwrap(),
                expected,
                "{input}"
            );
        }
    }

    #[test]
    fn rfc8785_section_3_2_3_sorting_exact_output() {
        let input = r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canon(input), expected);
    }

    #[test]
    fn rfc8785_appendix_b_number_samples() {
        // IEEE 754 bit patterns and their canonical text, RFC 8785 Appendix B.
        for (bits, expected) in [
            (0x0000000000000000u64, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ] {
            let mut out = String::new();
            write_double(&mut out, f64::from_bits(bits)).unwrap();
            assert_eq!(out, expected, "{bits:#018x}");
        }
        for bits in [0x7fffffffffffffffu64, 0x7ff0000000000000] {
            let mut out = String::new();
            assert!(matches!(
                write_double(&mut out, f64::from_bits(bits)),
                Err(CanonicalError::NonFiniteNumber(_))
            ));
        }
    }

    #[test]
    fn parsing_then_writing_is_exact_for_shortest_doubles() {
        // The parser must round to the nearest double (serde_json's `float_roundtrip`), or the
        // canonical text of a value read from a file would differ from the writer's.
        for text in [
            "333333333.3333333",
            "1.0000000000000001e+23",
            "5e-324",
            "0.1",
            "1424953923781206.2",
        ] {
            assert_eq!(canon(text), text);
        }
    }

    proptest::proptest! {
        #[test]
        fn every_finite_double_round_trips_through_its_canonical_text(bits in proptest::prelude::any::<u64>()) {
            let f = f64::from_bits(bits);
            proptest::prop_assume!(f.is_finite());
            let mut out = String::new();
            write_double(&mut out, f).unwrap();
            let back: f64 = out.parse().unwrap();
            proptest::prop_assert!(back == f, "{} -> {} -> {}", f, out, back);
            // No form with fewer significant digits exists (Rust's shortest is never longer).
            let sig = |s: &str| {
                let m = s.split(['e', 'E']).next().unwrap_or("");
                m.chars().filter(char::is_ascii_digit).collect::<String>().trim_matches('0').len()
            };
            let shortest = format!("{:e}", f.abs());
            proptest::prop_assert!(sig(&out) <= sig(&shortest), "{} vs {}", out, shortest);
        }
    }

    #[test]
    fn rejects_integers_beyond_double_precision() {
        let v: Value = serde_json::from_str("9007199254740993").unwrap();
        assert!(matches!(
            to_canonical(&v),
            Err(CanonicalError::UnsafeInteger(_))
        ));
    }

    #[test]
    fn rejects_duplicate_keys_at_any_depth() {
        let err = parse_strict(br#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
        assert!(err.to_string().contains("duplicate key `b`"), "{err}");
        assert!(parse_strict(br#"{"a": 1, "a": 1}"#).is_err());
        assert!(parse_strict(br#"[{"x": 1}, {"x": 2}]"#).is_ok());
    }

    #[test]
    fn rejects_trailing_bytes() {
        assert!(parse_strict(b"{} {}").is_err());
    }
}
