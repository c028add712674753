//! Redaction of PostgreSQL URLs for messages: the one function every log
//! line and error that shows a database URL goes through.

/// Query parameters whose values are secrets (libpq's names).
const SECRET_PARAMS: [&str; 2] = ["password", "sslpassword"];

/// `url` with its secrets replaced by `***`: the password of
/// `user:password@`, and the values of `password=` and `sslpassword=`
/// query parameters (`?password=…`, `&password=…`, any case). Everything
/// else is kept, so the message still says which server was meant.
pub fn redact(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = redact_userinfo(head);
    if let Some(query) = query {
        out.push('?');
        out.push_str(&redact_query(query));
    }
    out
}

fn redact_userinfo(head: &str) -> String {
    let Some(start) = head.find("://").map(|i| i + 3) else {
        return head.to_owned();
    };
    let rest = &head[start..];
    let authority = &rest[..rest.find(['/', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &head[..start],
                &authority[..colon],
                &rest[at..]
            ),
            None => head.to_owned(),
        },
        None => head.to_owned(),
    }
}

fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if SECRET_PARAMS.iter().any(|s| key.eq_ignore_ascii_case(s)) => {
                format!("{key}=***")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_in_userinfo_and_query_are_hidden() {
        // Invariant: no form of a password survives redaction, and the
        // rest of the URL (user, host, database, other options) does.
        let cases = [
            (
                "postgres://tally:s3cret@db:5432/tally",
                "postgres://tally:***@db:5432/tally",
            ),
            (
                "postgres://u:p%40ss@w@h/db?sslmode=require",
                "postgres://u:***@h/db?sslmode=require",
            ),
            (
                "postgres://u@h/db?password=s3cret",
                "postgres://u@h/db?password=***",
            ),
            (
                "postgres://h/db?user=u&password=s3cret&sslmode=disable",
                "postgres://h/db?user=u&password=***&sslmode=disable",
            ),
            (
                "postgresql://h/db?PASSWORD=s3cret&sslpassword=k3y",
                "postgresql://h/db?PASSWORD=***&sslpassword=***",
            ),
            (
                "postgres://a:b@h/db?password=c",
                "postgres://a:***@h/db?password=***",
            ),
            ("postgres://u@h:1/db", "postgres://u@h:1/db"),
            ("postgres:///tally", "postgres:///tally"),
            (
                "postgres://h/db?host=/run/pg",
                "postgres://h/db?host=/run/pg",
            ),
        ];
        for (url, want) in cases {
            let got = redact(url);
            assert_eq!(got, want, "{url}");
            for secret in ["s3cret", "p%40ss", "k3y"] {
                assert!(!got.contains(secret), "{got}");
            }
        }
    }
}
