//! Which hosts a room may reach through its egress proxy: rules written as
//! `host[:port]` patterns, presets named `@name`, and the one decision
//! made for every request, outside the room.
//!
//! A pattern is matched against the name the room asked for, before any
//! lookup: the room needs no DNS, and a rule means what it says
//! (`*.github.com` cannot be met by an address that happens to resolve
//! there). An address the room asks for directly is matched as written,
//! so only a rule naming that address lets it through.

use std::fmt;

/// The presets a person can write instead of hunting for domains. Each
/// names what its tool needs to run and fetch, nothing more; docs/guide.md
/// lists them. Only port 443 (and 80 where the tool fetches over plain
/// HTTP) is opened: the proxy carries HTTP and CONNECT, not ssh.
pub const PRESETS: &[(&str, &[&str])] = &[
    (
        "claude",
        &[
            "api.anthropic.com:443",
            "console.anthropic.com:443",
            "statsig.anthropic.com:443",
            "claude.ai:443",
            "statsig.com:443",
            "sentry.io:443",
        ],
    ),
    ("codex", &["api.openai.com:443", "auth.openai.com:443", "chatgpt.com:443"]),
    ("github", &["github.com:443", "*.github.com:443", "*.githubusercontent.com:443", "ghcr.io:443", "*.ghcr.io:443"]),
    ("pypi", &["pypi.org:443", "files.pythonhosted.org:443"]),
    ("npm", &["registry.npmjs.org:443", "registry.yarnpkg.com:443"]),
    ("crates", &["crates.io:443", "index.crates.io:443", "static.crates.io:443", "static.rust-lang.org:443"]),
    ("go", &["proxy.golang.org:443", "sum.golang.org:443", "storage.googleapis.com:443"]),
    ("debian", &["deb.debian.org:80", "deb.debian.org:443", "security.debian.org:80", "security.debian.org:443"]),
];

/// How a room reaches the network, from the widest to the strictest (the
/// order is what "the strictest of two" means).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Deserialize, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The engine's network, as every container has it.
    #[default]
    Open,
    /// No route out; HTTP and CONNECT through the proxy, checked here.
    Allowlist,
    /// No route out, and no proxy.
    None,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Allowlist => "allowlist",
            Mode::None => "none",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatternError {
    #[error("`{0}` is empty: write a host such as `api.example.com` or `*.example.com:443`")]
    Empty(String),
    #[error("`{0}` names no preset; the presets are {list}", list = preset_names())]
    UnknownPreset(String),
    #[error("`{0}` has a port that is not a number from 1 to 65535 (or `*`)")]
    BadPort(String),
    #[error("`{0}`: a `*` may only stand alone or as the first label (`*.example.com`)")]
    BadWildcard(String),
    #[error("`{0}` holds a character no host name has")]
    BadHost(String),
}

fn preset_names() -> String {
    PRESETS.iter().map(|(name, _)| format!("@{name}")).collect::<Vec<_>>().join(", ")
}

/// One `host[:port]` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// As written (lower-cased), for the log and for `egress deny`.
    text: String,
    host: Host,
    /// `None`: any port.
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// `*`: every host.
    Any,
    /// `example.com`, or an address.
    Exact(String),
    /// `*.example.com`: any name with one or more labels before
    /// `.example.com`, not `example.com` itself (write both for both, as
    /// certificates do).
    Below(String),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    /// One pattern. A preset (`@claude`) is expanded by [`rules`], not here.
    pub fn parse(text: &str) -> Result<Rule, PatternError> {
        let text = text.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err(PatternError::Empty(text));
        }
        let (host, port) = split_port(&text)?;
        let host = host.trim_end_matches('.');
        let host = if host == "*" {
            Host::Any
        } else if let Some(rest) = host.strip_prefix("*.") {
            check_name(rest, &text)?;
            Host::Below(rest.to_string())
        } else {
            check_name(host, &text)?;
            Host::Exact(host.to_string())
        };
        Ok(Rule { text, host, port })
    }

    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            Host::Any => true,
            Host::Exact(name) => host == *name,
            Host::Below(name) => {
                host.len() > name.len() + 1 && host.ends_with(name.as_str()) && {
                    let cut = host.len() - name.len() - 1;
                    host.as_bytes()[cut] == b'.'
                }
            }
        }
    }
}

/// `host[:port]`, with IPv6 addresses in brackets (`[::1]:443`).
fn split_port(text: &str) -> Result<(&str, Option<u16>), PatternError> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((addr, after)) = rest.split_once(']') else {
            return Err(PatternError::BadHost(text.into()));
        };
        match after {
            "" => (addr, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (addr, Some(port)),
                None => return Err(PatternError::BadHost(text.into())),
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            // More than one colon and no brackets: an IPv6 address alone.
            Some(_) => (text, None),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(PatternError::Empty(text.into()));
    }
    let port = match port {
        None | Some("*") => None,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(PatternError::BadPort(text.into())),
            Ok(p) => Some(p),
        },
    };
    Ok((host, port))
}

fn check_name(name: &str, text: &str) -> Result<(), PatternError> {
    if name.contains('*') {
        return Err(PatternError::BadWildcard(text.into()));
    }
    if name.is_empty() || name.split('.').any(str::is_empty) {
        return Err(PatternError::BadHost(text.into()));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_')) {
        return Err(PatternError::BadHost(text.into()));
    }
    Ok(())
}

/// Patterns and presets as a person writes them, expanded into rules.
pub fn rules<S: AsRef<str>>(written: &[S]) -> Result<Vec<Rule>, PatternError> {
    let mut out = Vec::new();
    for text in written {
        let text = text.as_ref().trim();
        match text.strip_prefix('@') {
            Some(name) => {
                let Some((_, patterns)) = PRESETS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
                    return Err(PatternError::UnknownPreset(text.into()));
                };
                for p in *patterns {
                    out.push(Rule::parse(p)?);
                }
            }
            None => out.push(Rule::parse(text)?),
        }
    }
    Ok(out)
}

/// What a room may reach: its allow rules, and deny rules that win over
/// them (`egress deny` on a host a broad rule lets through).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
}

/// The answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let through, by this rule.
    Allowed(String),
    /// Refused by a deny rule.
    Denied(String),
    /// No rule lets it through.
    NotAllowed,
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allowed(_))
    }
}

impl Policy {
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        if let Some(rule) = self.deny.iter().find(|r| r.matches(host, port)) {
            return Decision::Denied(rule.text.clone());
        }
        match self.allow.iter().find(|r| r.matches(host, port)) {
            Some(rule) => Decision::Allowed(rule.text.clone()),
            None => Decision::NotAllowed,
        }
    }

    /// `egress allow PATTERN`: the pattern's rules are allowed, and a deny
    /// rule written the same way is taken back.
    pub fn allow(&mut self, written: &str) -> Result<(), PatternError> {
        for rule in rules(&[written])? {
            self.deny.retain(|r| r.text != rule.text);
            if !self.allow.contains(&rule) {
                self.allow.push(rule);
            }
        }
        Ok(())
    }

    /// `egress deny PATTERN`: an allow rule written the same way is taken
    /// back; a host a broader rule still lets through is denied outright.
    pub fn deny(&mut self, written: &str) -> Result<(), PatternError> {
        for rule in rules(&[written])? {
            self.allow.retain(|r| r.text != rule.text);
            if !self.deny.contains(&rule) {
                self.deny.push(rule);
            }
        }
        Ok(())
    }
}

/// The rule to suggest for a refused `host:port`: the host on its port.
pub fn suggestion(host: &str, port: u16) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> Policy {
        Policy { allow: rules(allow).unwrap(), deny: Vec::new() }
    }

    #[test]
    fn a_pattern_matches_the_name_and_port_it_names() {
        let cases: &[(&str, &str, u16, bool)] = &[
            ("api.anthropic.com", "api.anthropic.com", 443, true),
            ("api.anthropic.com", "API.Anthropic.com.", 80, true),
            ("api.anthropic.com", "anthropic.com", 443, false),
            ("api.anthropic.com", "xapi.anthropic.com", 443, false),
            ("*.github.com:443", "api.github.com", 443, true),
            ("*.github.com:443", "a.b.github.com", 443, true),
            ("*.github.com:443", "api.github.com", 22, false),
            ("*.github.com:443", "github.com", 443, false),
            ("*.github.com", "evilgithub.com", 443, false),
            ("*.github.com", "github.com.evil.org", 443, false),
            ("*", "anything.example", 1, true),
            ("*:443", "anything.example", 80, false),
            ("example.org:*", "example.org", 8080, true),
            ("10.0.0.7:8080", "10.0.0.7", 8080, true),
            ("10.0.0.7:8080", "10.0.0.70", 8080, false),
            ("[::1]:443", "::1", 443, true),
            ("::1", "::1", 9, true),
        ];
        for (pattern, host, port, want) in cases {
            let rule = Rule::parse(pattern).unwrap();
            assert_eq!(rule.matches(host, *port), *want, "{pattern} against {host}:{port}");
        }
    }

    #[test]
    fn a_pattern_that_cannot_mean_a_host_is_refused_naming_it() {
        type Is = fn(&PatternError) -> bool;
        let cases: &[(&str, Is)] = &[
            ("", |e| matches!(e, PatternError::Empty(_))),
            ("example.com:0", |e| matches!(e, PatternError::BadPort(_))),
            ("example.com:70000", |e| matches!(e, PatternError::BadPort(_))),
            ("example.com:https", |e| matches!(e, PatternError::BadPort(_))),
            ("api.*.com", |e| matches!(e, PatternError::BadWildcard(_))),
            ("**.com", |e| matches!(e, PatternError::BadWildcard(_))),
            ("exa mple.com", |e| matches!(e, PatternError::BadHost(_))),
            ("a..b", |e| matches!(e, PatternError::BadHost(_))),
            ("https://example.com", |e| matches!(e, PatternError::BadPort(_) | PatternError::BadHost(_))),
            ("[::1", |e| matches!(e, PatternError::BadHost(_))),
        ];
        for (text, is) in cases {
            let err = Rule::parse(text).unwrap_err();
            assert!(is(&err), "{text:?} gave {err:?}");
            if !text.is_empty() {
                assert!(err.to_string().contains(text), "{err} names {text}");
            }
        }
    }

    #[test]
    fn a_preset_expands_to_its_patterns_and_an_unknown_one_lists_the_presets() {
        let expanded = rules(&["@claude", "example.org"]).unwrap();
        assert!(expanded.iter().any(|r| r.matches("api.anthropic.com", 443)));
        assert!(!expanded.iter().any(|r| r.matches("api.anthropic.com", 80)));
        assert!(expanded.last().unwrap().matches("example.org", 1234));
        let err = rules(&["@claud"]).unwrap_err();
        assert_eq!(err, PatternError::UnknownPreset("@claud".into()));
        assert!(err.to_string().contains("@claude") && err.to_string().contains("@pypi"), "{err}");
    }

    #[test]
    fn every_preset_parses() {
        for (name, _) in PRESETS {
            let expanded = rules(&[format!("@{name}")]).unwrap();
            assert!(!expanded.is_empty(), "@{name}");
        }
    }

    #[test]
    fn the_decision_names_the_rule_that_let_a_request_through() {
        let p = policy(&["*.github.com:443", "pypi.org"]);
        assert_eq!(p.decide("api.github.com", 443), Decision::Allowed("*.github.com:443".into()));
        assert_eq!(p.decide("pypi.org", 80), Decision::Allowed("pypi.org".into()));
        assert_eq!(p.decide("example.com", 443), Decision::NotAllowed);
        assert_eq!(Policy::default().decide("example.com", 443), Decision::NotAllowed);
    }

    #[test]
    fn a_deny_wins_over_a_broader_allow_and_an_allow_takes_it_back() {
        let mut p = policy(&["*.github.com"]);
        p.deny("gist.github.com").unwrap();
        assert_eq!(p.decide("gist.github.com", 443), Decision::Denied("gist.github.com".into()));
        assert!(p.decide("api.github.com", 443).allowed());
        p.allow("gist.github.com").unwrap();
        assert!(p.decide("gist.github.com", 443).allowed());
        p.deny("*.github.com").unwrap();
        assert!(p.allow.iter().all(|r| r.text != "*.github.com"), "the same rule is taken back from allow");
        assert!(!p.decide("api.github.com", 443).allowed());
    }

    #[test]
    fn allowing_twice_keeps_one_rule() {
        let mut p = Policy::default();
        p.allow("example.org:443").unwrap();
        p.allow("EXAMPLE.org:443").unwrap();
        assert_eq!(p.allow.len(), 1);
    }

    #[test]
    fn the_suggestion_is_the_host_on_its_port() {
        assert_eq!(suggestion("Example.COM.", 443), "example.com:443");
        assert_eq!(suggestion("::1", 8080), "[::1]:8080");
    }
}
