//! Saying an error on one line, causes included (`a: b: c`), where no
//! `main` walks the chain for us: a log line, a reply, the credential
//! helper's answer. The enums keep each cause once, as their `source`.

/// `error` and its causes, joined by `: `.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot serve /x")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn an_error_is_said_with_its_cause_once() {
        let e = Outer(std::io::Error::from_raw_os_error(13));
        assert_eq!(chain(&e), "cannot serve /x: Permission denied (os error 13)");
    }
}
