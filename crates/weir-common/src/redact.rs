//! Secrets in option values: Flink's rule for which keys are sensitive and its mask, and
//! a scrubber for SQL text that is about to be kept somewhere (the shell's history).

use std::borrow::Cow;

/// What a sensitive value is displayed as (Flink's mask).
pub const MASK: &str = "******";

/// Parts of a key that make its value a secret, as in Flink's
/// `GlobalConfiguration.SENSITIVE_KEYS` (matched case-insensitively anywhere in the key:
/// `s3.secret-key`, `properties.sasl.jaas.config`, `password`, `*.token`, …).
const SENSITIVE: &[&str] = &[
    "password",
    "secret",
    "fs.azure.account.key",
    "apikey",
    "api-key",
    "auth-params",
    "service-key",
    "token",
    "basic-auth",
    "jaas.config",
    "http-headers",
];

/// Whether the value of option `key` must never be displayed or logged.
pub fn is_sensitive(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SENSITIVE.iter().any(|s| key.contains(s))
}

/// `value`, or the mask when `key` is sensitive.
pub fn display_value<'a>(key: &str, value: &'a str) -> &'a str {
    if is_sensitive(key) { MASK } else { value }
}

/// `sql` with the value of every `'key' = 'value'` pair whose key is sensitive replaced
/// by the mask (`WITH (…)` options and `SET` statements alike). Quotes are SQL's: `''`
/// inside a literal is one quote. Text that does not parse as such pairs is kept.
pub fn redact_sql(sql: &str) -> Cow<'_, str> {
    // The single-quoted literals of `sql`, as byte ranges including their quotes.
    let bytes = sql.as_bytes();
    let mut literals = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\'' {
            let start = i;
            i += 1;
            loop {
                match bytes.get(i) {
                    None => break,
                    Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => i += 2,
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            literals.push(start..i);
        } else {
            i += 1;
        }
    }
    let mut masked = Vec::new();
    for pair in literals.windows(2) {
        let (key, value) = (&pair[0], &pair[1]);
        let between = sql[key.end..value.start].trim();
        // Only the last literal can be unterminated, so a key always has both quotes.
        let key_text = sql[key.start + 1..key.end - 1].replace("''", "'");
        if between == "=" && is_sensitive(&key_text) {
            masked.push(value.clone());
        }
    }
    if masked.is_empty() {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for range in masked {
        out.push_str(&sql[at..range.start]);
        out.push('\'');
        out.push_str(MASK);
        out.push('\'');
        at = range.end;
    }
    out.push_str(&sql[at..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_keys_are_flinks() {
        for key in [
            "s3.secret-key",
            "S3.Secret-Key",
            "password",
            "properties.ssl.keystore.password",
            "properties.sasl.jaas.config",
            "gcs.token",
        ] {
            assert!(is_sensitive(key), "{key}");
        }
        for key in ["s3.access-key", "path", "format", "s3.endpoint"] {
            assert!(!is_sensitive(key), "{key}");
        }
    }

    #[test]
    fn sql_loses_its_secrets_and_keeps_the_rest() {
        let sql = "CREATE TABLE t (a INT) WITH ('path' = 's3://b/x', 's3.secret-key' = 'it''s hidden',\n  'properties.sasl.jaas.config'='x y z');\nSET 'password' = 'p';";
        assert_eq!(
            redact_sql(sql),
            "CREATE TABLE t (a INT) WITH ('path' = 's3://b/x', 's3.secret-key' = '******',\n  'properties.sasl.jaas.config'='******');\nSET 'password' = '******';"
        );
        let plain = "SELECT 'secret' FROM t WHERE x = 'password'";
        assert_eq!(redact_sql(plain), plain);
        // An unterminated literal is kept as it is.
        assert_eq!(redact_sql("SET 'token' = 'abc"), "SET 'token' = '******'");
    }
}
