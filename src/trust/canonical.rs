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
}

/// Serialise `value` as RFC 8785 canonical JSON bytes.
pub fn to_canonical(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Ok(out.into_bytes())
}

/// Serialise any `Serialize` value canonically (via `serde_json::Value`).
pub fn to_canonical_from<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let v = serde_json::to_value(value)
        .map_err(|e| CanonicalError::NonFiniteNumber(e.to_string()))?;
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
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let e: i32 = exp.parse().unwrap_or(0);
    let n = e + 1; // position of the decimal point relative to the digit string
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n - 1 >= 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).abs());
    }
    Ok(())
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
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
        let keys: Vec<&str> = vec!["\r", "1", "\u{80}", "\u{f6}", "\u{20ac}", "\u{1f600}", "\u{fb33}"];
        let mut pos = 0;
        for k in keys {
            let needle = serde_json::to_string(k).unwrap();
            let needle = if k == "\r" { "\"\\r\"".to_string() } else { needle };
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
            assert_eq!(String::from_utf8(to_canonical(&v).unwrap()).unwrap(), expected, "{input}");
        }
    }

    #[test]
    fn rejects_integers_beyond_double_precision() {
        let v: Value = serde_json::from_str("9007199254740993").unwrap();
        assert!(matches!(to_canonical(&v), Err(CanonicalError::UnsafeInteger(_))));
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
